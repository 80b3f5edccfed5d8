# Checks that README.md quotes, line for line, the C++ that `attnlab fp8` prints (lab/fp8_snippet.inc):
#   cmake -DATTNLAB=<attnlab> -DREADME=<README.md> -P readme_snippet.cmake
execute_process(COMMAND ${ATTNLAB} fp8 --snippet RESULT_VARIABLE rc OUTPUT_VARIABLE snippet)
if(NOT rc EQUAL 0 OR snippet STREQUAL "")
  message(FATAL_ERROR "'attnlab fp8 --snippet' failed (exit status ${rc})")
endif()
file(READ ${README} readme)
string(FIND "${readme}" "${snippet}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md does not quote lab/fp8_snippet.inc as 'attnlab fp8 --snippet' prints it:\n${snippet}")
endif()
message("README.md quotes the FP8 snippet at offset ${at}")
