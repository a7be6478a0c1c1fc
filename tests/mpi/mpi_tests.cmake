# Multi-rank tests: real processes under mpirun (np 1..4, including 3).
foreach(zt_mpi_case np1_equals_single stages_np2 stages_np3 stages_np4 stage3_gathered_bound stage3_gathers_per_pass
                    grad_accum rank_dies data_differs_by_rank
                    offload_stages deferred_copies recompute_stages recompute_cuts_activations
                    planner_matches attention_fused imbalance_jitter trace oom_each_phase
                    resume_bitwise reshard export)
  add_test(NAME mpi_${zt_mpi_case}
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/mpi/zt_mpi_test.py ${zt_mpi_case}
                   $<TARGET_FILE:zt-train> ${PROJECT_SOURCE_DIR}/launch/zt-run)
  set_tests_properties(mpi_${zt_mpi_case} PROPERTIES LABELS "mpi" TIMEOUT 900 RUN_SERIAL TRUE)
endforeach()
# The deferred copies' ordering is about streams, not memory errors: the
# first pass's alone (the sanitizer pass is CI's longest).
set_tests_properties(mpi_deferred_copies PROPERTIES LABELS "mpi;slow")
# Failure behaviour (docs/failure.md): ranks that disagree, kills during a
# save, damaged checkpoints and `latest`, checkpoint retention.
foreach(zt_fail_case disagree agree_negative kill_during_save latest damage keep)
  add_test(NAME fail_${zt_fail_case}
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/mpi/zt_failure_test.py ${zt_fail_case}
                   $<TARGET_FILE:zt-train> ${PROJECT_SOURCE_DIR}/launch/zt-run)
  set_tests_properties(fail_${zt_fail_case} PROPERTIES LABELS "mpi" TIMEOUT 900 RUN_SERIAL TRUE)
endforeach()
# 20 kill trials and 14 MPMD launches: the normal pass runs them; under the
# sanitizers their code paths are run by fail_damage, fail_latest, fail_keep
# and fail_agree_negative.
set_tests_properties(fail_kill_during_save fail_disagree PROPERTIES LABELS "mpi;slow")
# The longest scenarios (64 runs; a 400-step convergence) run in the normal
# build only; the sanitizer pass (tests/run_all.sh) excludes label "slow".
set_tests_properties(mpi_planner_matches PROPERTIES LABELS "mpi;slow")

# Mixed precision (tests/mpi/zt_precision_test.py): bf16/fp16 stages bitwise,
# memory against fp32 and the planner, the reduce dtype, loss scaling, the
# non-finite guard, fp16 resume and convergence.
foreach(zt_prec_case stages memory reduce_dtype planner convergence loss_scale resume)
  add_test(NAME precision_${zt_prec_case}
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/mpi/zt_precision_test.py ${zt_prec_case}
                   $<TARGET_FILE:zt-train> ${PROJECT_SOURCE_DIR}/launch/zt-run)
  set_tests_properties(precision_${zt_prec_case} PROPERTIES LABELS "mpi" TIMEOUT 900 RUN_SERIAL TRUE)
endforeach()
# Three 400-step runs, 26 planner runs, and the 4-layer d_model-256 runs of
# the memory case (2 min under the sanitizers): the normal build only; the
# sanitizer pass runs the same code paths in precision_stages and the rest.
set_tests_properties(precision_convergence precision_planner precision_memory PROPERTIES LABELS "mpi;slow")

# The CUDA backend under mpirun, on the CPU emulator (ZT_CUDA=EMU builds).
if(ZT_CUDA_EMU)
  foreach(zt_mpi_case cuda_emu_stages cuda_emu_bf16 cuda_emu_overlap cuda_emu_resume cuda_emu_gpt2_block cuda_emu_oom
                      cuda_emu_attention_fused cuda_emu_nccl_fails
                      cuda_emu_startup_fails_one_rank)
    add_test(NAME mpi_${zt_mpi_case}
             COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/mpi/zt_mpi_test.py ${zt_mpi_case}
                     $<TARGET_FILE:zt-train> ${PROJECT_SOURCE_DIR}/launch/zt-run)
    set_tests_properties(mpi_${zt_mpi_case} PROPERTIES LABELS "mpi;cuda" TIMEOUT 900 RUN_SERIAL TRUE)
  endforeach()
endif()

# The delayed parameter update (tests/mpi/zt_offload_delay_test.py): refused
# without offload, really one step stale, stages bitwise, resume bitwise, the
# planner's host bytes, convergence on the default model (slow).
foreach(zt_delay_case refused stale stages resume planner convergence)
  add_test(NAME offload_delay_${zt_delay_case}
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/mpi/zt_offload_delay_test.py ${zt_delay_case}
                   $<TARGET_FILE:zt-train> ${PROJECT_SOURCE_DIR}/launch/zt-run)
  set_tests_properties(offload_delay_${zt_delay_case} PROPERTIES LABELS "mpi" TIMEOUT 900 RUN_SERIAL TRUE)
endforeach()
set_tests_properties(offload_delay_convergence PROPERTIES LABELS "mpi;slow")

# DeepSpeed's stage-3 knobs (tests/mpi/zt_stage3_knobs_test.py): persistent
# units, the cap on live gathered parameters, the reuse distance and the
# optimizer's sub-group size; each bitwise equal to the run without it, with
# zt-plan exact.
foreach(zt_knob_case persist max_live reuse sub_group)
  add_test(NAME stage3_knobs_${zt_knob_case}
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/mpi/zt_stage3_knobs_test.py ${zt_knob_case}
                   $<TARGET_FILE:zt-train> ${PROJECT_SOURCE_DIR}/launch/zt-run)
  set_tests_properties(stage3_knobs_${zt_knob_case} PROPERTIES LABELS "mpi" TIMEOUT 900 RUN_SERIAL TRUE)
endforeach()

# What the optimizer keeps (tests/mpi/zt_optimizer_test.py): SGD with
# momentum beside AdamW: stages and offload bitwise, optimizer bytes per rank,
# the planner, resume, convergence (slow); frozen units; zt-plan's largest
# micro-batch and sequence length under --mem-limit.
foreach(zt_opt_case stages bytes planner resume convergence freeze max_batch)
  add_test(NAME optimizer_${zt_opt_case}
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/mpi/zt_optimizer_test.py ${zt_opt_case}
                   $<TARGET_FILE:zt-train> ${PROJECT_SOURCE_DIR}/launch/zt-run)
  set_tests_properties(optimizer_${zt_opt_case} PROPERTIES LABELS "mpi" TIMEOUT 900 RUN_SERIAL TRUE)
endforeach()
# optimizer_bytes: 32 runs of byte accounting, the first pass's alone.
set_tests_properties(optimizer_convergence optimizer_bytes PROPERTIES LABELS "mpi;slow")

# Adafactor and 8-bit Adam (tests/mpi/zt_optimizer_state_test.py): stages,
# offload and bf16 bitwise; optimizer bytes per rank against a closed form
# and zt-plan --rank; resume; resharding; convergence.
foreach(zt_os_case stages stages_more bytes resume reshard convergence)
  add_test(NAME optimizer_state_${zt_os_case}
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/mpi/zt_optimizer_state_test.py ${zt_os_case}
                   $<TARGET_FILE:zt-train> ${PROJECT_SOURCE_DIR}/launch/zt-run)
  set_tests_properties(optimizer_state_${zt_os_case} PROPERTIES LABELS "mpi" TIMEOUT 900 RUN_SERIAL TRUE)
endforeach()
# The sanitizer pass runs the code paths (stages with offload, resume);
# the byte counts (64 runs), bf16 and the delayed update, resharding and
# the 400 steps are the first pass's.
set_tests_properties(optimizer_state_bytes optimizer_state_stages_more optimizer_state_reshard
                     optimizer_state_convergence PROPERTIES LABELS "mpi;slow")
if(ZT_CUDA_EMU)
  add_test(NAME optimizer_state_cuda_emu
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/mpi/zt_optimizer_state_test.py cuda_emu
                   $<TARGET_FILE:zt-train> ${PROJECT_SOURCE_DIR}/launch/zt-run)
  set_tests_properties(optimizer_state_cuda_emu PROPERTIES LABELS "mpi;cuda" TIMEOUT 900 RUN_SERIAL TRUE)
endif()

# One CTest test per case of a multi-rank test script, named PREFIX_CASE:
# run as SCRIPT CASE ZT_TRAIN ZT_RUN (tests/mpi/zt_harness.py), serially.
function(zt_script_cases script prefix labels timeout)
  foreach(zt_case ${ARGN})
    add_test(NAME ${prefix}_${zt_case}
             COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/mpi/${script} ${zt_case}
                     $<TARGET_FILE:zt-train> ${PROJECT_SOURCE_DIR}/launch/zt-run)
    set_tests_properties(${prefix}_${zt_case} PROPERTIES LABELS "${labels}" TIMEOUT ${timeout} RUN_SERIAL TRUE)
  endforeach()
endfunction()

# The device allocator's modes (tests/mpi/zt_allocator_test.py): caching
# and expandable against simple, bitwise and per category; the free-block figures;
# caching's fragmentation OOM under --seq-len-jitter and a cap; --metrics-file;
# zt-plan's peak and expected reserved bytes under each mode.
zt_script_cases(zt_allocator_test.py allocator "mpi" 600 modes fragmentation metrics planner)
# The sanitizer pass runs the modes and the metrics file; the jittered
# model's searches for a cap are the first pass's.
set_tests_properties(allocator_fragmentation allocator_planner PROPERTIES LABELS "mpi;slow")
if(ZT_CUDA_EMU) # expandable segments through the driver's VMM calls, on the emulator
  zt_script_cases(zt_allocator_test.py allocator "mpi;cuda" 600 cuda_emu)
endif()

# The CPU backend's modelled host-device link (tests/mpi/zt_link_test.py):
# bandwidth per direction, overlap on the copy streams, zt-plan's transfer
# bytes and times, refusals; on the emulator, CUDA's refusal.
zt_script_cases(zt_link_test.py link "mpi" 600 bandwidth overlap planner refused)
# Parameter offload at stage 3 (tests/mpi/zt_offload_params_test.py):
# bitwise, bytes on device, host and link against zt-plan, checkpoints,
# refusals; on the emulator, bitwise with pinned shards.
zt_script_cases(zt_offload_params_test.py offload_params "mpi" 600 bitwise resume refused)
# The sanitizer pass runs the link's bandwidth, overlap and refusals and
# parameter offload's resume and refusals (the same code paths); the
# planner's comparisons over many runs are the first pass's.
set_tests_properties(link_planner offload_params_bitwise PROPERTIES LABELS "mpi;slow")
if(ZT_CUDA_EMU)
  zt_script_cases(zt_link_test.py link "mpi;cuda" 300 cuda_emu)
  zt_script_cases(zt_offload_params_test.py offload_params "mpi;cuda" 600 cuda_emu)
endif()

# Activation offload (tests/mpi/zt_offload_activations_test.py): bitwise
# --recompute full alone (also with deferred copies), the device
# activations peak and the host pool against the closed form, zt-plan
# exact on device, host and link bytes, refusals; on the emulator, bitwise
# behind real stream events.
zt_script_cases(zt_offload_activations_test.py offload_activations "mpi" 300 bitwise memory planner refused)
if(ZT_CUDA_EMU)
  zt_script_cases(zt_offload_activations_test.py offload_activations "mpi;cuda" 300 cuda_emu)
endif()

# The NVMe tier (tests/mpi/zt_offload_nvme_test.py): bitwise host offload
# with the state and shards in a swap file, host bytes and I/O against
# zt-plan, VmHWM, an I/O error that stops every rank, the I/O path in the
# log, checkpoints, refusals; on the emulator, bitwise over NCCL.
zt_script_cases(zt_offload_nvme_test.py offload_nvme "mpi" 600 bitwise memory io_error io_paths resume refused)
# The sanitizer pass runs the error, path, resume and refusal cases (the
# same stream); the comparisons over many runs and the VmHWM measure (which
# the sanitizers' own memory would blur) are the first pass's.
set_tests_properties(offload_nvme_bitwise offload_nvme_memory PROPERTIES LABELS "mpi;slow")
if(ZT_CUDA_EMU)
  zt_script_cases(zt_offload_nvme_test.py offload_nvme "mpi;cuda" 600 cuda_emu)
endif()

# Several hosts (tests/mpi/zt_hosts_test.py): the collective watchdog on one
# host; simulated hosts (launch/sim-hosts: network namespaces, needs root)
# for node-aware ranks and a link taken down mid-run. Those cases exit 77,
# reported as skipped with the reason, where namespaces cannot be made.
zt_script_cases(zt_hosts_test.py hosts "mpi" 300 watchdog sim_hosts hybrid_node link_bytes hpz link_down)
set_tests_properties(hosts_sim_hosts hosts_hybrid_node hosts_link_bytes hosts_hpz hosts_link_down PROPERTIES SKIP_RETURN_CODE 77)
# The link test waits out two timeouts: the first pass runs it.
set_tests_properties(hosts_link_down PROPERTIES LABELS "mpi;slow")
if(ZT_CUDA_EMU) # the device half of the watchdog: a stalled peer's NCCL collective on a stream
  zt_script_cases(zt_hosts_test.py hosts "mpi;cuda" 300 watchdog_cuda_emu)
endif()

# Hybrid sharding on one host (tests/mpi/zt_hybrid_test.py): stages 0-3
# bitwise at np 4 in groups of 2, the closed form and zt-plan per rank, a
# hybrid checkpoint resumed without groups, refusals and DeepSpeed's key.
zt_script_cases(zt_hybrid_test.py hybrid "mpi" 300 stages resume refused reshard)
if(ZT_CUDA_EMU) # NCCL groups on the emulator
  zt_script_cases(zt_hybrid_test.py hybrid "mpi;cuda" 300 cuda_emu)
endif()
