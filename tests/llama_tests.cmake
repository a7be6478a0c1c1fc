# The Llama family (examples/llama/). Tiers (tests/CMakeLists.txt): the
# gradient check, stages at np 2, recomputation and offload, and resume are
# quick, so the sanitizers run the family's kernels, the decoder scaffold's
# keep/replay/offload paths and its checkpoints; np 3, resharding, the
# planner and the family refusal are full: under the sanitizers their C
# paths are those quick tests' and the GPT's (mpi_stages_np3, mpi_reshard,
# mpi_planner_matches, fail_latest); the 400-step convergence run is full.
#
# A whole-model finite-difference gradient check through the engine at one
# rank (GQA, multi-query and plain attention; tied and untied heads), and
# bf16 and fp16 against fp32.
add_executable(test_llama_gradcheck ${CMAKE_CURRENT_SOURCE_DIR}/test_llama_gradcheck.c)
target_link_libraries(test_llama_gradcheck PRIVATE zt_llama MPI::MPI_C)
add_test(NAME test_llama_gradcheck COMMAND test_llama_gradcheck)
set_tests_properties(test_llama_gradcheck PROPERTIES LABELS "quick" TIMEOUT 300)

# zt-train --model llama under real mpirun (tests/mpi/zt_llama_test.py), one
# CTest test per case, run serially (each launches several ranks).
foreach(zt_llama_case stages_np2 stages_np3 recompute_offload resume reshard planner family_refused convergence)
  add_test(NAME llama_${zt_llama_case}
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/mpi/zt_llama_test.py ${zt_llama_case}
                   $<TARGET_FILE:zt-train> ${PROJECT_SOURCE_DIR}/launch/zt-run)
  set_tests_properties(llama_${zt_llama_case} PROPERTIES LABELS "quick" TIMEOUT 900 RUN_SERIAL TRUE)
endforeach()
set_tests_properties(llama_stages_np3 llama_reshard llama_planner llama_family_refused llama_convergence
                     PROPERTIES LABELS "full")
