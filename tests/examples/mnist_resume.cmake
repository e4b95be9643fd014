# mnist_cnn resumed: one run of two epochs, and one stopped after its first epoch then resumed
# from its checkpoint, must print the same parameter sum (17 digits: the same bits, as far as a
# float64 sum of every parameter tells). PROGRAM is mnist_cnn, WORK_DIR a scratch folder.
# The three runs are three processes: each would choose its GEMM and conv2d paths by timing them
# (NOTE [GEMM path by measurement], NOTE [oneDNN convolutions]), and two processes can choose
# differently where paths time alike, with other last bits. Fixed paths make the bits repeat
# across processes, as torch.backends.cudnn.benchmark = False does for cuDNN.
set(fixed_paths HALFGRAD_CPU_GEMM=fp32:native,bf16:native HALFGRAD_CPU_CONV=onednn)
function(run_program out_var)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env ${fixed_paths} "${PROGRAM}" ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mnist_cnn ${ARGN} failed (${rc}):\n${out}\n${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(common --make-synthetic 600 --root "${WORK_DIR}/digits" --epochs 2 --batch 50 --dtype bf16)
run_program(whole ${common})
run_program(first ${common} --checkpoint "${WORK_DIR}/run.safetensors" --stop-after 1)
run_program(rest ${common} --checkpoint "${WORK_DIR}/run.safetensors" --resume)
string(REGEX MATCH "parameter sum [^\n]*" whole_sum "${whole}")
string(REGEX MATCH "parameter sum [^\n]*" rest_sum "${rest}")
message(STATUS "uninterrupted: ${whole_sum}\nresumed:       ${rest_sum}")
if(whole_sum STREQUAL "" OR NOT whole_sum STREQUAL rest_sum)
  message(FATAL_ERROR "the resumed run differs:\n${whole}\n---\n${first}\n---\n${rest}")
endif()
if(NOT rest MATCHES "resumed at epoch 1")
  message(FATAL_ERROR "the second run did not resume:\n${rest}")
endif()
