# End-to-end tests of zt-train (real processes, real files).
find_package(Python3 REQUIRED COMPONENTS Interpreter)
foreach(zt_cli_case bad_input config_precedence deepspeed_config deepspeed_problems determinism convergence summary_schema file_data)
  add_test(NAME cli_${zt_cli_case}
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/cli/zt_cli_test.py ${zt_cli_case} $<TARGET_FILE:zt-train>)
  set_tests_properties(cli_${zt_cli_case} PROPERTIES LABELS "cli" TIMEOUT 600)
endforeach()
set_tests_properties(cli_convergence PROPERTIES LABELS "cli;slow")
# The corpus of DeepSpeed-shaped configs (tests/configs/expect.json says what
# each must do), under mpirun at np 2.
add_test(NAME cli_deepspeed_corpus
         COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/tests/configs/zt_config_corpus_test.py
                 $<TARGET_FILE:zt-train> ${PROJECT_SOURCE_DIR}/launch/zt-run)
# First pass only (slow): under the sanitizers the config parser is the
# config fuzzer's (tests/fuzz), and these 2-rank runs would double its time.
set_tests_properties(cli_deepspeed_corpus PROPERTIES LABELS "cli;mpi;slow" TIMEOUT 600 RUN_SERIAL TRUE)
