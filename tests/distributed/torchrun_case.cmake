# Runs the [torchrun] case of the TCP store test as torchrun starts a job: two processes at
# once (the two COMMANDs of one execute_process run concurrently, as a pipeline), RANK 0 and 1,
# WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, no mpirun. Each rank's Catch report goes to a
# file of its own (rank 0's stdout would feed rank 1's stdin). A port that turns out taken is
# replaced by another, up to three tries.
#   cmake -D PROGRAM=... -D OUT_DIR=... -P torchrun_case.cmake
foreach(attempt RANGE 1 3)
  string(RANDOM LENGTH 4 ALPHABET 123456789 digits)
  math(EXPR port "20000 + ${digits} % 10000")
  set(launch ${CMAKE_COMMAND} -E env WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=${port})
  set(reports "${OUT_DIR}/torchrun_case_rank0.txt" "${OUT_DIR}/torchrun_case_rank1.txt")
  file(REMOVE ${reports})
  execute_process(
    COMMAND ${launch} RANK=0 LOCAL_RANK=0 "${PROGRAM}" "[torchrun]" --warn NoTests -o
      "${OUT_DIR}/torchrun_case_rank0.txt"
    COMMAND ${launch} RANK=1 LOCAL_RANK=1 "${PROGRAM}" "[torchrun]" --warn NoTests -o
      "${OUT_DIR}/torchrun_case_rank1.txt"
    RESULTS_VARIABLE statuses OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
  set(report "")
  foreach(file IN LISTS reports)
    if(EXISTS "${file}")
      file(READ "${file}" text)
      string(APPEND report "${text}")
    endif()
  endforeach()
  message("port ${port}:\n${report}${out}${err}")
  if(NOT "${report}" MATCHES "expected to listen on port")
    break()
  endif()
endforeach()
string(REGEX MATCHALL "All tests passed" passes "${report}")
list(LENGTH passes pass_count)
if(NOT statuses STREQUAL "0;0" OR NOT pass_count EQUAL 2)
  message(FATAL_ERROR "torchrun case: expected both ranks to pass, got exit statuses "
                      "${statuses} and ${pass_count} passing reports")
endif()
message("torchrun case: passed")
