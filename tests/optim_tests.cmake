# The optimizer interface (optim/zt_optim.h): every registered optimizer's
# contract (bytes = planner, host = device, resume and reshard round trips)
# under 2 ranks, and the matrix hook through a test-only optimizer at 1, 2
# and 4 ranks against one process's arithmetic. Real processes under
# launch/zt-run (mpirun with the project's transport defaults).
foreach(zt_optim_test test_optim_conformance test_optim_hook)
  add_executable(${zt_optim_test} ${CMAKE_CURRENT_SOURCE_DIR}/${zt_optim_test}.c)
  target_link_libraries(${zt_optim_test} PRIVATE zt_shard MPI::MPI_C ${MATH_LIB})
endforeach()
add_test(NAME optim_conformance COMMAND ${PROJECT_SOURCE_DIR}/launch/zt-run -np 2 $<TARGET_FILE:test_optim_conformance>)
set_tests_properties(optim_conformance PROPERTIES LABELS "quick;mpi" TIMEOUT 300)
foreach(zt_np 1 2 4)
  add_test(NAME optim_hook_np${zt_np} COMMAND ${PROJECT_SOURCE_DIR}/launch/zt-run -np ${zt_np} $<TARGET_FILE:test_optim_hook>)
  set_tests_properties(optim_hook_np${zt_np} PROPERTIES LABELS "quick;mpi" TIMEOUT 300)
endforeach()
# More ranks than cores: alone, so that CTest's -j 2 does not stack it on
# another test.
set_tests_properties(optim_hook_np4 PROPERTIES RUN_SERIAL TRUE)

# Muon's Newton-Schulz transform (optim/zt_newton_schulz.h): singular values
# of its output for square, wide and tall inputs against a Jacobi solve in
# double, determinism and the tall/wide symmetry; no ranks, quick.
add_executable(test_newton_schulz ${CMAKE_CURRENT_SOURCE_DIR}/test_newton_schulz.c)
target_link_libraries(test_newton_schulz PRIVATE zt_shard ${MATH_LIB})
add_test(NAME test_newton_schulz COMMAND test_newton_schulz)
set_tests_properties(test_newton_schulz PROPERTIES LABELS "unit;quick" TIMEOUT 120)
