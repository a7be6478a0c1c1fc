# Unit tests of the runtime library: CPU kernels (finite-difference gradient
# checks; the bf16 and fp16 tables against the fp32 one), AdamW against a
# closed form, 8-bit AdamW and Adafactor's kernels against double precision
# (test_optim_kernels), the tracked allocator, the vector math against
# libm, stochastic rounding to bf16 (test_sround) and the wire codes of
# quantized communication (test_wire). Each is a standalone
# executable that returns non-zero on failure; quick: seconds each, and the
# sanitizers see every kernel's indexing.
foreach(zt_unit_test test_ops_gradcheck test_ops_dtype test_adamw test_optim_kernels test_mem test_mem_caching test_streams test_vmath
                     test_sround test_wire)
  add_executable(${zt_unit_test} ${CMAKE_CURRENT_SOURCE_DIR}/${zt_unit_test}.c)
  target_link_libraries(${zt_unit_test} PRIVATE zt_runtime)
  add_test(NAME ${zt_unit_test} COMMAND ${zt_unit_test})
  set_tests_properties(${zt_unit_test} PROPERTIES LABELS "unit;quick" TIMEOUT 300)
endforeach()

# The Llama kernels of the CPU's fp32 table (tests/test_llama_ops.c):
# finite-difference gradients of RMSNorm, RoPE, SwiGLU, the GQA head
# expansion and rope -> gqa -> attention, against double references. A few
# seconds: labelled quick as well.
add_executable(test_llama_ops ${CMAKE_CURRENT_SOURCE_DIR}/test_llama_ops.c)
target_link_libraries(test_llama_ops PRIVATE zt_runtime)
add_test(NAME test_llama_ops COMMAND test_llama_ops)
set_tests_properties(test_llama_ops PROPERTIES LABELS "unit;quick" TIMEOUT 120)

# The stage-3 gather schedule's decisions (shard/schedule.c), which the
# engine and zt-plan share: label quick (no model, no ranks).
add_executable(test_schedule ${CMAKE_CURRENT_SOURCE_DIR}/test_schedule.c)
target_link_libraries(test_schedule PRIVATE zt_shard)
add_test(NAME test_schedule COMMAND test_schedule)
set_tests_properties(test_schedule PROPERTIES LABELS "unit;quick" TIMEOUT 60)

# The whole-bill sampler (runtime/zt_proc_mem.h) on the test's own process:
# parts that add up, allocator pages live and cached, a watch's mapping,
# a waiting thread's stack. Quick: well under a second.
add_executable(test_proc_mem ${CMAKE_CURRENT_SOURCE_DIR}/test_proc_mem.c)
target_link_libraries(test_proc_mem PRIVATE zt_runtime pthread)
add_test(NAME test_proc_mem COMMAND test_proc_mem)
set_tests_properties(test_proc_mem PROPERTIES LABELS "unit;quick" TIMEOUT 60)

# The leak watch (train/leak_watch.h) on made-up samples: named once within
# the window (also when the budget declines step ends), quiet on noise, on a
# cache that grows with allocated and on parts not measured. Quick.
add_executable(test_leak_watch ${CMAKE_CURRENT_SOURCE_DIR}/test_leak_watch.c)
target_link_libraries(test_leak_watch PRIVATE zt_train)
add_test(NAME test_leak_watch COMMAND test_leak_watch)
set_tests_properties(test_leak_watch PROPERTIES LABELS "unit;quick" TIMEOUT 60)
