# The CUDA kernel table against the CPU one (tests/test_cuda_ops.c). Only in
# CUDA builds; on a machine without a visible GPU the test exits 77 and ctest
# reports it as skipped. Included from tests/CMakeLists.txt. Every test here
# but the kit is quick: the emulator pass runs them all (`-L cuda`), and the
# sanitizer build has no CUDA backend to build them in.
if(NOT ZT_HAVE_CUDA)
  return()
endif()
add_executable(test_cuda_ops ${CMAKE_CURRENT_LIST_DIR}/test_cuda_ops.c)
target_link_libraries(test_cuda_ops PRIVATE zt_runtime zt_runtime_cuda ${ZT_CUDART})
add_test(NAME test_cuda_ops COMMAND test_cuda_ops)
set_tests_properties(test_cuda_ops PROPERTIES LABELS "unit;cuda;quick" SKIP_RETURN_CODE 77 TIMEOUT 300)

# The CUDA emulator's own test (ZT_CUDA=EMU builds only): a .cu file, run on
# the emulator through the same translation as the kernels. And the GEMM
# kernels again with every cuBLASLt matmul refused at run time (as the real
# library may refuse an algorithm its heuristic chose): the cuBLAS fallback
# and the unfused bias must give the same values.
if(ZT_CUDA_EMU)
  add_test(NAME test_cuda_ops_lt_refused COMMAND test_cuda_ops matmul,attention)
  set_tests_properties(test_cuda_ops_lt_refused PROPERTIES LABELS "unit;cuda;quick" TIMEOUT 300
                                                           ENVIRONMENT ZT_EMU_LT_REFUSE=1)
  zt_cuda_sources(emulator_test_source ${CMAKE_CURRENT_LIST_DIR}/cuda_emu/test_emulator.cu)
  add_executable(test_cuda_emulator ${emulator_test_source})
  target_link_libraries(test_cuda_emulator PRIVATE zt_cuda_emu)
  add_test(NAME test_cuda_emulator COMMAND test_cuda_emulator)
  set_tests_properties(test_cuda_emulator PROPERTIES LABELS "unit;cuda;quick" TIMEOUT 120)
endif()

# The GPU kit (launch/make_gpu_kit.sh) from this build runs with the system's
# Open MPI and libraries hidden (tests/kit/test_gpu_kit.sh; skipped unless
# root with unshare). Real CUDA builds only: the kit packs their programs.
# Full: it tests packaging (which libraries the kit carries), no C code.
if(NOT ZT_CUDA_EMU)
  add_test(NAME gpu_kit COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/kit/test_gpu_kit.sh ${CMAKE_BINARY_DIR}
                                     ${CMAKE_CURRENT_BINARY_DIR}/gpu_kit_test)
  set_tests_properties(gpu_kit PROPERTIES LABELS "full" SKIP_RETURN_CODE 77 TIMEOUT 300 RUN_SERIAL TRUE)
endif()

# The host-staging communicator's values and its pool of pinned buffers, under
# mpirun at np 2 and 3 (tests/test_staged_pool.c; skipped without a device).
add_executable(test_staged_pool ${CMAKE_CURRENT_LIST_DIR}/test_staged_pool.c)
target_link_libraries(test_staged_pool PRIVATE zt_comm_cuda ${ZT_CUDART})
foreach(zt_np 2 3)
  add_test(NAME mpi_staged_pool_np${zt_np}
           COMMAND ${PROJECT_SOURCE_DIR}/launch/zt-run -np ${zt_np} $<TARGET_FILE:test_staged_pool>)
  set_tests_properties(mpi_staged_pool_np${zt_np} PROPERTIES LABELS "mpi;cuda;quick" SKIP_RETURN_CODE 77 TIMEOUT 120
                                                              RUN_SERIAL TRUE)
endforeach()

# The CUDA module's refusals (tests/cuda_module/): a missing module, one of
# another ABI and a shared object with no entry, each refused by name with
# exit 2; a CPU run ignores ZT_CUDA_MODULE. Quick: three short refusals.
foreach(zt_flavour stale foreign)
  add_library(zt_cuda_module_${zt_flavour} MODULE ${CMAKE_CURRENT_LIST_DIR}/cuda_module/stale_module.c)
  target_include_directories(zt_cuda_module_${zt_flavour} PRIVATE ${PROJECT_SOURCE_DIR}/runtime)
endforeach()
target_compile_definitions(zt_cuda_module_stale PRIVATE ZT_STALE_ABI)
add_test(NAME cuda_module_refused
         COMMAND Python3::Interpreter ${CMAKE_CURRENT_LIST_DIR}/cuda_module/zt_cuda_module_test.py
                 $<TARGET_FILE:zt-train> $<TARGET_FILE:zt_cuda_module_stale> $<TARGET_FILE:zt_cuda_module_foreign>)
set_tests_properties(cuda_module_refused PROPERTIES LABELS "cuda;quick" TIMEOUT 120)
