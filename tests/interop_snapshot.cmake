# interop_snapshot: the tests of one part of issue 43 (interop), registered here.
# zt-train --memory-snapshot (tests/interop/zt_memory_snapshot_test.py, one
# test per case): PyTorch memory_viz pickles per rank, read with Python's
# pickle: their structure, the trace's peak against summary.json, the
# --memory-snapshot-entries ring, and the snapshot of an OOM run. Runs go
# through launch/zt-run (mpirun), so the tests run serially.
foreach(zt_case np2 np3 entries oom)
  add_test(NAME interop_snapshot_${zt_case}
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/interop/zt_memory_snapshot_test.py ${zt_case}
                   $<TARGET_FILE:zt-train> ${PROJECT_SOURCE_DIR}/launch/zt-run)
  set_tests_properties(interop_snapshot_${zt_case} PROPERTIES LABELS "interop" TIMEOUT 300 RUN_SERIAL TRUE)
endforeach()
# np2 reaches the simple and caching writers, oom the refusal's event and
# the atomic write on the failure path; np3 (expandable's map events) and
# the ring's wrap-around (entries) are the full tier's.
zt_label(quick interop_snapshot_np2 interop_snapshot_oom)
zt_label(full interop_snapshot_np3 interop_snapshot_entries)

# The pickle writer's edge values and a CPU zt_mem's snapshot through a ring
# that wraps (tests/interop/test_memory_snapshot.c writes them, the script
# reads them with Python's pickle); no mpirun, well under a second.
add_executable(test_memory_snapshot ${CMAKE_CURRENT_SOURCE_DIR}/interop/test_memory_snapshot.c)
target_link_libraries(test_memory_snapshot PRIVATE zt_runtime)
add_test(NAME interop_snapshot_pickle
         COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/interop/zt_memory_snapshot_test.py pickle
                 $<TARGET_FILE:test_memory_snapshot>)
set_tests_properties(interop_snapshot_pickle PROPERTIES LABELS "interop;quick" TIMEOUT 60)
