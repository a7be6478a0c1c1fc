# End-to-end tests of zt-train (real processes, real files).
find_package(Python3 REQUIRED COMPONENTS Interpreter)
foreach(zt_cli_case bad_input config_precedence deepspeed_config deepspeed_problems determinism convergence summary_schema file_data)
  add_test(NAME cli_${zt_cli_case}
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/cli/zt_cli_test.py ${zt_cli_case} $<TARGET_FILE:zt-train>)
  set_tests_properties(cli_${zt_cli_case} PROPERTIES LABELS "cli" TIMEOUT 600)
endforeach()
set_tests_properties(cli_convergence PROPERTIES LABELS "cli;slow")
