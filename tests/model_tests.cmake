# Model-level tests of the toy GPT through the engine: a whole-model
# finite-difference gradient check (fp32, plus bf16 against fp32) and the
# byte-exact memory accounting of init / forward / backward / optimizer,
# including --mem-limit refusals per phase; the units' state machine and
# recorded use order; the learning-rate schedules against DeepSpeed's.
# Quick: one process each, and they reach the engine's C paths directly.
foreach(zt_model_test test_model_gradcheck test_accounting test_units test_lr_schedule)
  add_executable(${zt_model_test} ${CMAKE_CURRENT_SOURCE_DIR}/${zt_model_test}.c)
  target_link_libraries(${zt_model_test} PRIVATE zt_gpt MPI::MPI_C)
  add_test(NAME ${zt_model_test} COMMAND ${zt_model_test})
  set_tests_properties(${zt_model_test} PROPERTIES LABELS "model;quick" TIMEOUT 300)
endforeach()
