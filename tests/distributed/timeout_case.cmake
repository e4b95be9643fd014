# Runs the [timeout] case of the process group test under mpirun and judges it: the job must
# end through the MPI_Abort the timeout asked for (a non-zero status; NOTE [Collective
# timeouts]), after both ranks' Catch summaries said passed.
#   cmake -D MPIEXEC=... -D PROGRAM=... -P timeout_case.cmake
execute_process(
  COMMAND "${MPIEXEC}" -n 2 --oversubscribe "${PROGRAM}" "[timeout]"
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE status TIMEOUT 50)
message("${out}${err}")
string(REGEX MATCHALL "All tests passed" passes "${out}")
list(LENGTH passes pass_count)
if(NOT pass_count EQUAL 2)
  message(FATAL_ERROR "timeout case: expected both ranks' Catch summaries to say passed, got "
                      "${pass_count}")
endif()
if(NOT "${out}${err}" MATCHES "all_reduce on rank 0 timed out")
  message(FATAL_ERROR "timeout case: expected rank 0's exit to name the timed-out all_reduce")
endif()
if(status EQUAL 0)
  message(FATAL_ERROR "timeout case: expected the job to end through MPI_Abort (non-zero), got 0")
endif()
message("timeout case: passed (the job ended through MPI_Abort as designed: ${status})")
