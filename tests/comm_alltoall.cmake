# The all-to-all with per-peer byte counts (zt_comm_all_to_all_start, for
# Ulysses' sequence parallelism), tests/test_comm_alltoall.c under mpirun at
# np 1-4: uneven counts with empty pairs, every byte received and every byte
# between chunks checked, the statistics, the refusals, the watchdog's
# message and the dry communicator's counts. Quick: about a second per np,
# and the sanitizers see the MPI communicator's count and displacement
# arrays. Included from tests/CMakeLists.txt.
add_executable(test_comm_alltoall ${CMAKE_CURRENT_LIST_DIR}/test_comm_alltoall.c)
target_link_libraries(test_comm_alltoall PRIVATE zt_comm)
foreach(zt_np 1 2 3 4)
  add_test(NAME mpi_comm_alltoall_np${zt_np}
           COMMAND ${PROJECT_SOURCE_DIR}/launch/zt-run -np ${zt_np} $<TARGET_FILE:test_comm_alltoall>)
  set_tests_properties(mpi_comm_alltoall_np${zt_np} PROPERTIES LABELS "mpi;quick" TIMEOUT 120 RUN_SERIAL TRUE)
endforeach()

# The same on device buffers, ordered by a producer and a consumer stream:
# NCCL (one emulated GPU per rank) at np 1-4 and host staging (every rank on
# one GPU) at np 2 and 3. The emulator pass runs them (label cuda) with
# stream jitter, so an exchange that did not wait for its producer stream
# would send stale bytes; elsewhere they skip (exit 77) without a GPU. On a
# real GPU node, run them without ZT_EMU_* (NCCL needs a GPU per rank).
if(ZT_HAVE_CUDA)
  add_executable(test_comm_alltoall_cuda ${CMAKE_CURRENT_LIST_DIR}/test_comm_alltoall.c)
  target_compile_definitions(test_comm_alltoall_cuda PRIVATE ZT_A2A_CUDA)
  target_link_libraries(test_comm_alltoall_cuda PRIVATE zt_comm_cuda ${ZT_CUDART})
  foreach(zt_np 1 2 3 4)
    add_test(NAME mpi_comm_alltoall_nccl_np${zt_np}
             COMMAND ${PROJECT_SOURCE_DIR}/launch/zt-run -np ${zt_np} $<TARGET_FILE:test_comm_alltoall_cuda> nccl)
    set_tests_properties(mpi_comm_alltoall_nccl_np${zt_np} PROPERTIES
                         LABELS "mpi;cuda;quick" SKIP_RETURN_CODE 77 TIMEOUT 120 RUN_SERIAL TRUE
                         ENVIRONMENT "ZT_EMU_DEVICES=${zt_np};ZT_EMU_JITTER_US=200")
  endforeach()
  foreach(zt_np 2 3)
    add_test(NAME mpi_comm_alltoall_staged_np${zt_np}
             COMMAND ${PROJECT_SOURCE_DIR}/launch/zt-run -np ${zt_np} $<TARGET_FILE:test_comm_alltoall_cuda> staged)
    set_tests_properties(mpi_comm_alltoall_staged_np${zt_np} PROPERTIES
                         LABELS "mpi;cuda;quick" SKIP_RETURN_CODE 77 TIMEOUT 120 RUN_SERIAL TRUE
                         ENVIRONMENT "ZT_EMU_DEVICES=1;ZT_EMU_JITTER_US=200")
  endforeach()
endif()
