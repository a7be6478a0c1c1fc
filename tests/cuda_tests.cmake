# The CUDA kernel table against the CPU one (tests/test_cuda_ops.c). Only in
# CUDA builds; on a machine without a visible GPU the test exits 77 and ctest
# reports it as skipped. Included from tests/CMakeLists.txt.
if(NOT ZT_HAVE_CUDA)
  return()
endif()
find_package(CUDAToolkit REQUIRED)
add_executable(test_cuda_ops ${CMAKE_CURRENT_LIST_DIR}/test_cuda_ops.c)
target_link_libraries(test_cuda_ops PRIVATE zt_runtime zt_runtime_cuda CUDA::cudart)
add_test(NAME test_cuda_ops COMMAND test_cuda_ops)
set_tests_properties(test_cuda_ops PROPERTIES LABELS "unit;cuda" SKIP_RETURN_CODE 77 TIMEOUT 300)
