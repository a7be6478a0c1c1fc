# End-to-end tests of zt-train (real processes, real files).
find_package(Python3 REQUIRED COMPONENTS Interpreter)
foreach(zt_cli_case bad_input config_precedence deepspeed_config deepspeed_problems determinism convergence summary_schema file_data)
  add_test(NAME cli_${zt_cli_case}
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/cli/zt_cli_test.py ${zt_cli_case} $<TARGET_FILE:zt-train>)
  set_tests_properties(cli_${zt_cli_case} PROPERTIES LABELS "cli" TIMEOUT 600)
endforeach()
# Quick: one to three runs each, through the config file, DeepSpeed's
# problems, the summary and the file data source.
zt_label(quick cli_config_precedence cli_deepspeed_problems cli_summary_schema cli_file_data)
# 30 runs that each stop at an option, and 10 of DeepSpeed's configs: the
# messages and the mapping are the point, and under the sanitizers the flag,
# JSON and DeepSpeed readers are the config fuzzer's (tests/fuzz), the
# --mem-limit refusals test_accounting's, and what the configs select
# (clipping, warmup, the optimizers) every run's. Determinism and the
# 400-step convergence compare results of code every test runs.
zt_label(full cli_bad_input cli_deepspeed_config cli_determinism cli_convergence)
# The corpus of DeepSpeed-shaped configs (tests/configs/expect.json says what
# each must do), under mpirun at np 2.
add_test(NAME cli_deepspeed_corpus
         COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/tests/configs/zt_config_corpus_test.py
                 $<TARGET_FILE:zt-train> ${PROJECT_SOURCE_DIR}/launch/zt-run)
# Full: under the sanitizers the config parser is the config fuzzer's
# (tests/fuzz), and these 2-rank runs would double its time.
set_tests_properties(cli_deepspeed_corpus PROPERTIES LABELS "cli;mpi;full" TIMEOUT 600 RUN_SERIAL TRUE)
