# mnist_cnn resumed: a run of two epochs that keeps its first epoch's checkpoint, and a second
# run resumed from that checkpoint, must print the same parameter sum (17 digits: the same bits,
# as far as a float64 sum of every parameter tells). PROGRAM is mnist_cnn, WORK_DIR a scratch
# folder.
# The two runs are two processes, and each process chooses its GEMM and conv2d paths by timing
# them (NOTE [GEMM path by measurement], NOTE [oneDNN convolutions]): the checkpoint carries the
# first run's choices to the second (NOTE [Kernel choices across processes]), so no path is
# fixed here. A run stopped with --stop-after must say so and write the checkpoint it resumes
# from.
function(run_program out_var)
  execute_process(COMMAND "${PROGRAM}" ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mnist_cnn ${ARGN} failed (${rc}):\n${out}\n${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(common --make-synthetic 600 --root "${WORK_DIR}/digits" --epochs 2 --batch 50 --dtype bf16)
run_program(whole ${common} --checkpoint "${WORK_DIR}/whole.safetensors" --keep-checkpoints)
if(NOT EXISTS "${WORK_DIR}/whole.safetensors.epoch1")
  message(FATAL_ERROR "the first run kept no checkpoint of its first epoch:\n${whole}")
endif()
run_program(rest ${common} --checkpoint "${WORK_DIR}/whole.safetensors.epoch1" --resume)
string(REGEX MATCH "parameter sum [^\n]*" whole_sum "${whole}")
string(REGEX MATCH "parameter sum [^\n]*" rest_sum "${rest}")
message(STATUS "uninterrupted: ${whole_sum}\nresumed:       ${rest_sum}")
if(whole_sum STREQUAL "" OR NOT whole_sum STREQUAL rest_sum)
  message(FATAL_ERROR "the resumed run differs:\n${whole}\n---\n${rest}")
endif()
if(NOT rest MATCHES "resumed at epoch 1")
  message(FATAL_ERROR "the second run did not resume:\n${rest}")
endif()
run_program(stopped ${common} --checkpoint "${WORK_DIR}/stopped.safetensors" --stop-after 1)
if(NOT stopped MATCHES "stopped after epoch 1" OR stopped MATCHES "parameter sum"
   OR NOT EXISTS "${WORK_DIR}/stopped.safetensors")
  message(FATAL_ERROR "--stop-after 1 did not stop after the first epoch with a checkpoint:\n"
                      "${stopped}")
endif()
