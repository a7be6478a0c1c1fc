# Unit tests of the runtime library: CPU kernels (finite-difference gradient
# checks; the bf16 and fp16 tables against the fp32 one), AdamW against a
# closed form, 8-bit AdamW and Adafactor's kernels against double precision
# (test_optim_kernels), the tracked allocator, and the vector math against
# libm. Each is a standalone executable that returns non-zero on failure;
# quick: seconds each, and the sanitizers see every kernel's indexing.
foreach(zt_unit_test test_ops_gradcheck test_ops_dtype test_adamw test_optim_kernels test_mem test_mem_caching test_streams test_vmath)
  add_executable(${zt_unit_test} ${CMAKE_CURRENT_SOURCE_DIR}/${zt_unit_test}.c)
  target_link_libraries(${zt_unit_test} PRIVATE zt_runtime)
  add_test(NAME ${zt_unit_test} COMMAND ${zt_unit_test})
  set_tests_properties(${zt_unit_test} PROPERTIES LABELS "unit;quick" TIMEOUT 300)
endforeach()
