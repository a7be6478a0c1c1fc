# Unit test of the fused CPU AdamW in offload/: bitwise equality with the
# runtime's zt_ops.adamw for every ISA this CPU has, thread counts, alignments.
add_executable(test_cpu_adam ${CMAKE_CURRENT_SOURCE_DIR}/test_cpu_adam.c)
target_link_libraries(test_cpu_adam PRIVATE zt_offload zt_runtime)
add_test(NAME test_cpu_adam COMMAND test_cpu_adam)
set_tests_properties(test_cpu_adam PROPERTIES LABELS "unit;offload" TIMEOUT 300)
