# One CTest fuzz run (tests/fuzz/CMakeLists.txt): copies the seed corpus
# CORPUS to WORK/corpus (libFuzzer adds the inputs it finds there, never in
# the source tree), runs FUZZER over it with a fixed seed and RUNS
# executions, and fails when libFuzzer exits non-zero: a crash, a leak, a
# sanitizer report, a harness check, a timeout or running out of memory.
# Crashing inputs are kept in WORK/artifacts/.
foreach(v FUZZER CORPUS WORK RUNS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_fuzzer.cmake: -D${v}= is missing")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK}/corpus")
file(MAKE_DIRECTORY "${WORK}/corpus" "${WORK}/artifacts")
file(GLOB seeds "${CORPUS}/*")
if(seeds)
  file(COPY ${seeds} DESTINATION "${WORK}/corpus")
endif()
set(cmd "${FUZZER}" -seed=1 -runs=${RUNS} -rss_limit_mb=2048 -timeout=25 -print_final_stats=1
        "-artifact_prefix=${WORK}/artifacts/" "${WORK}/corpus")
string(REPLACE ";" " " shown "${cmd}")
message(STATUS "running: ${shown}")
execute_process(COMMAND ${cmd} RESULT_VARIABLE rc)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "${FUZZER} failed (exit ${rc}); the crashing input, if any, is in ${WORK}/artifacts/")
endif()
