# Installs the halfgrad build in BUILD_DIR into a fresh prefix, then builds and runs the
# consumer project in CONSUMER_SOURCE against it, as a user's project would.
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  set(LAST_OUTPUT "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")

set(extra)
if(CUDA_COMPILER)
  list(APPEND extra "-DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}")
endif()
if(SANITIZE)  # a sanitized static library needs the sanitizer runtimes at link time
  list(APPEND extra "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE}")
endif()
run(${CMAKE_COMMAND} -S "${CONSUMER_SOURCE}" -B "${WORK_DIR}/build" -G "${GENERATOR}"
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" ${extra})
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run("${WORK_DIR}/build/consumer")
message(STATUS "consumer printed:\n${LAST_OUTPUT}")
if(NOT LAST_OUTPUT MATCHES "consumer ok")
  message(FATAL_ERROR "the consumer did not report success:\n${LAST_OUTPUT}")
endif()
# The same project built with clang, where it is installed (scripts/setup installs it for the
# sanitizer build): clang's -Wall checks more than GCC's (-Woverloaded-virtual, NOTE
# [CustomForward hides Module's forward]), and a user's -Werror build must pass with either.
find_program(CLANGXX NAMES clang++)
if(CLANGXX)
  run(${CMAKE_COMMAND} -S "${CONSUMER_SOURCE}" -B "${WORK_DIR}/build-clang" -G "${GENERATOR}"
      -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix"
      "-DCMAKE_CXX_COMPILER=${CLANGXX}" ${extra})
  run(${CMAKE_COMMAND} --build "${WORK_DIR}/build-clang")
  run("${WORK_DIR}/build-clang/consumer")
  if(NOT LAST_OUTPUT MATCHES "consumer ok")
    message(FATAL_ERROR "the consumer built with clang did not report success:\n${LAST_OUTPUT}")
  endif()
endif()
# A consumer asking for no component needs no MPI: configured with MPI hidden from CMake, it
# builds and runs all the same. Against a build without the CUDA backend the CUDA toolkit is
# hidden too.
set(hidden -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON)
if(NOT CUDA_COMPILER)
  list(APPEND hidden -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)
endif()
run(${CMAKE_COMMAND} -S "${CONSUMER_SOURCE}" -B "${WORK_DIR}/build-no-components" -G "${GENERATOR}"
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" -DHG_CONSUMER_NO_COMPONENTS=ON
    ${hidden} ${extra})
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build-no-components")
run("${WORK_DIR}/build-no-components/consumer")
if(NOT LAST_OUTPUT MATCHES "consumer ok")
  message(FATAL_ERROR "the consumer without components did not report success:\n${LAST_OUTPUT}")
endif()
if(EXISTS "${WORK_DIR}/build-no-components/consumer_distributed")
  message(FATAL_ERROR "the consumer without components built consumer_distributed")
endif()
# Asking for a component the package does not have fails with the package's message.
execute_process(COMMAND ${CMAKE_COMMAND} -S "${CONSUMER_SOURCE}" -B "${WORK_DIR}/build-bad"
    -G "${GENERATOR}" "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" -DHG_CONSUMER_COMPONENT=tpu ${extra}
  RESULT_VARIABLE bad_rc OUTPUT_VARIABLE bad_out ERROR_VARIABLE bad_err)
if(bad_rc EQUAL 0 OR NOT "${bad_out}${bad_err}" MATCHES "expected components cuda or distributed, got tpu")
  message(FATAL_ERROR "an unknown component did not fail as expected:\n${bad_out}\n${bad_err}")
endif()
if(DISTRIBUTED)  # the build has halfgrad::distributed: the consumer must link it
  run("${WORK_DIR}/build/consumer_distributed")
  message(STATUS "consumer_distributed printed:\n${LAST_OUTPUT}")
  if(NOT LAST_OUTPUT MATCHES "consumer distributed ok")
    message(FATAL_ERROR "consumer_distributed did not report success:\n${LAST_OUTPUT}")
  endif()
endif()
