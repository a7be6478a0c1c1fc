# Unit test of the fused CPU AdamW in offload/: bitwise equality with the
# runtime's zt_ops.adamw for every ISA this CPU has, thread counts, alignments.
# Both tests here are quick: single processes over the offload C code.
add_executable(test_cpu_adam ${CMAKE_CURRENT_SOURCE_DIR}/test_cpu_adam.c)
target_link_libraries(test_cpu_adam PRIVATE zt_offload zt_runtime)
add_test(NAME test_cpu_adam COMMAND test_cpu_adam)
set_tests_properties(test_cpu_adam PROPERTIES LABELS "unit;offload;quick" TIMEOUT 300)

# The NVMe tier's swap file: requests, any-range reads and writes, the
# failure hook, with io_uring and with pread/pwrite.
add_executable(test_nvme ${CMAKE_CURRENT_SOURCE_DIR}/test_nvme.c)
target_link_libraries(test_nvme PRIVATE zt_offload zt_runtime)
add_test(NAME test_nvme COMMAND test_nvme)
set_tests_properties(test_nvme PROPERTIES LABELS "unit;offload;quick" TIMEOUT 120)
