# interop_trace: the tests of one part of issue 43 (interop), registered here.
# Per-rank traces for Holistic Trace Analysis (--trace-per-rank,
# docs/interop_traces.md): each case is two tiny mpirun jobs checked with
# plain json (HTA itself runs in bench/bench_hta.py, from a PyPI venv).
# np2: stage 3; np3: uneven shards and offload copies on the copy streams.
foreach(zt_case np2 np3)
  add_test(NAME interop_trace_hta_${zt_case}
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/interop/zt_trace_hta_test.py ${zt_case}
                   $<TARGET_FILE:zt-train> ${PROJECT_SOURCE_DIR}/launch/zt-run)
  set_tests_properties(interop_trace_hta_${zt_case} PROPERTIES LABELS "mpi;trace" TIMEOUT 300 RUN_SERIAL TRUE)
endforeach()
# Four seconds together; the sanitizer pass runs them too.
zt_label(quick interop_trace_hta_np2 interop_trace_hta_np3)
