# Warnings, -march=native and sanitizers, applied to halfgrad's own targets through the
# interface target halfgrad_build_flags (never exported: a consumer's flags stay its own).

add_library(halfgrad_build_flags INTERFACE)
target_compile_options(halfgrad_build_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-unused-parameter>)

if(HALFGRAD_NATIVE)
  target_compile_options(halfgrad_build_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()

if(HALFGRAD_SANITIZE)
  set(_hg_san "-fsanitize=${HALFGRAD_SANITIZE}")
  target_compile_options(halfgrad_build_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:${_hg_san} -fno-omit-frame-pointer -fno-sanitize-recover=all>)
  target_link_options(halfgrad_build_flags INTERFACE ${_hg_san})
endif()

# The fuzz targets link libFuzzer (-fsanitize=fuzzer); everything else is compiled with its
# coverage instrumentation, so the fuzzer sees which branches of the library an input reaches.
if(HALFGRAD_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "HALFGRAD_FUZZ needs clang (libFuzzer), got ${CMAKE_CXX_COMPILER_ID}")
  endif()
  if(NOT HALFGRAD_SANITIZE)
    message(FATAL_ERROR "HALFGRAD_FUZZ needs HALFGRAD_SANITIZE (e.g. address,undefined), got none")
  endif()
  target_compile_options(halfgrad_build_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
endif()
