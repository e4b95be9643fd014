# Keeps a document's quoted program output true: runs PROGRAM and fails unless every quoted
# block of DOC appears verbatim, as whole consecutive lines, in what the program prints.
#
#   cmake -D PROGRAM=<executable> -D DOC=<file.md> -D MARKER=<marker line> -P quoted_output.cmake
#
# A quoted block is a line equal to MARKER, followed on the next line by a ```text fence, up to
# the closing ``` fence. A marker without such a block, a document without any block, a program
# that exits non-zero, and a block missing from the output are errors; the message names the
# first block that fails (its line in DOC and its first line) and its first line not printed.
cmake_minimum_required(VERSION 3.25)  # the policies of the project (while(TRUE) among them)

foreach(var IN ITEMS PROGRAM DOC MARKER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "quoted_output.cmake: expected -D ${var}=...")
  endif()
endforeach()

execute_process(COMMAND "${PROGRAM}" RESULT_VARIABLE rc OUTPUT_VARIABLE output
                ERROR_VARIABLE errors)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} failed (exit status ${rc}):\n${output}\n${errors}")
endif()
file(READ "${DOC}" doc)
# Line starts and ends become "\n" on both sides, so that a block matches whole lines only.
set(output "\n${output}\n")
set(doc "\n${doc}")

# The 1-based line of DOC at offset `offset` of `doc` (which starts with the added "\n").
function(line_at offset result)
  string(SUBSTRING "${doc}" 0 ${offset} before)
  string(REGEX REPLACE "[^\n]" "" newlines "${before}")
  string(LENGTH "${newlines}" count)
  set(${result} ${count} PARENT_SCOPE)
endfunction()

set(opening "\n${MARKER}\n```text\n")
set(start 0)
set(blocks 0)
while(TRUE)
  string(SUBSTRING "${doc}" ${start} -1 rest)
  string(FIND "${rest}" "\n${MARKER}\n" marker_at)
  if(marker_at EQUAL -1)
    break()
  endif()
  math(EXPR marker_offset "${start} + ${marker_at}")
  line_at(${marker_offset} marker_line)
  math(EXPR marker_line "${marker_line} + 1")
  string(SUBSTRING "${rest}" ${marker_at} -1 rest)
  string(FIND "${rest}" "${opening}" opening_at)
  if(NOT opening_at EQUAL 0)
    message(FATAL_ERROR "${DOC}:${marker_line}: the marker '${MARKER}' is not followed by a "
                        "```text block on the next line")
  endif()
  string(LENGTH "${opening}" opening_length)
  string(SUBSTRING "${rest}" ${opening_length} -1 rest)
  # The block ends at the first line that is a fence (rest starts with the block's first line).
  string(FIND "\n${rest}" "\n```" closing_at)
  if(closing_at EQUAL -1)
    message(FATAL_ERROR "${DOC}:${marker_line}: the ```text block after the marker is not closed")
  endif()
  math(EXPR blocks "${blocks} + 1")
  if(closing_at EQUAL 0)
    message(FATAL_ERROR "${DOC}:${marker_line}: quoted block ${blocks} is empty")
  endif()
  math(EXPR block_length "${closing_at} - 1")
  string(SUBSTRING "${rest}" 0 ${block_length} block)

  string(FIND "${output}" "\n${block}\n" found)
  if(found EQUAL -1)
    # Name the block by its first line, and find its first line the program does not print.
    string(FIND "${block}" "\n" first_end)
    string(SUBSTRING "${block}" 0 ${first_end} first_line)
    set(missing "")
    set(lines "${block}\n")
    while(NOT lines STREQUAL "")
      string(FIND "${lines}" "\n" end)
      string(SUBSTRING "${lines}" 0 ${end} line)
      math(EXPR next "${end} + 1")
      string(SUBSTRING "${lines}" ${next} -1 lines)
      string(FIND "${output}" "\n${line}\n" line_found)
      if(line_found EQUAL -1)
        set(missing "${line}")
        break()
      endif()
    endwhile()
    if(missing STREQUAL "")
      set(detail "each of its lines is printed, but not as these consecutive lines")
    else()
      set(detail "its first line the program does not print: '${missing}'")
    endif()
    math(EXPR block_line "${marker_line} + 2")
    # (FATAL_ERROR reflows its text; NOTICE shows the lines as they are.)
    message(NOTICE "The quoted block:\n${block}\n\nWhat ${PROGRAM} printed:${output}")
    message(FATAL_ERROR
      "${DOC}:${block_line}: quoted block ${blocks} (first line '${first_line}') is not what "
      "${PROGRAM} prints; ${detail}. Update the block from the program's output (above).")
  endif()
  math(EXPR start "${marker_offset} + ${opening_length} + ${closing_at}")
endwhile()

if(blocks EQUAL 0)
  message(FATAL_ERROR "${DOC}: no quoted block found (expected at least one line '${MARKER}' "
                      "followed by a ```text block)")
endif()
message(STATUS "${blocks} quoted blocks of ${DOC} are in the output of ${PROGRAM}")
