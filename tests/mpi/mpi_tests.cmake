# Multi-rank tests: real processes under mpirun (np 1..4, including 3).
# Tiers (tests/CMakeLists.txt): under the sanitizers every process start
# costs seconds, so the quick tier holds the cases that reach a feature's C
# paths in few runs; the matrices over np, stage and dtype, the planner's and
# the byte counts' comparisons, convergence and timing are full, with asan
# where their C paths are their own.

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

# The engine across world sizes and stages (tests/mpi/zt_mpi_test.py). One
# set of stage runs per world size serves several checks: at np 2 offload
# and every recompute policy are compared with it, at np 3 fused attention.
zt_script_cases(zt_mpi_test.py mpi "mpi" 900
                np1_equals_single stages_np2 stages_np3 stages_np4 stage3_gathered_bound stage3_gathers_per_pass
                grad_accum rank_dies data_differs_by_rank deferred_copies recompute_cuts_activations
                planner_matches imbalance_jitter trace oom_each_phase resume_bitwise reshard export)
zt_label(quick mpi_np1_equals_single mpi_stages_np2 mpi_stages_np3 mpi_stage3_gathers_per_pass mpi_grad_accum
               mpi_rank_dies mpi_imbalance_jitter mpi_trace mpi_oom_each_phase mpi_resume_bitwise mpi_reshard
               mpi_export)
# np 4 runs the code np 3 runs (uneven shards are np 3's); --prefetch 0 and
# 2 change counts in the code every stage-3 run takes; per-rank data is
# every multi-rank test's; the activations' sizes and the planner are
# arithmetic over the paths stages_np2 runs.
zt_label(full mpi_stages_np4 mpi_stage3_gathered_bound mpi_data_differs_by_rank mpi_recompute_cuts_activations
              mpi_planner_matches)
# The deferred copy streams (ZT_CPU_DEFER_COPIES, 48 runs): ordering, not
# memory; under the sanitizers offload_activations_bitwise runs them.
zt_label(full mpi_deferred_copies)

# Failure behaviour (docs/failure.md): ranks that disagree, kills during a
# save, damaged checkpoints and `latest`, checkpoint retention.
zt_script_cases(zt_failure_test.py fail "mpi" 900 disagree agree_negative kill_during_save latest damage keep)
zt_label(quick fail_agree_negative fail_latest fail_keep)
# 8 kill trials, 11 MPMD launches and 10 damaged checkpoints: the refusal
# and fallback paths are fail_latest's and fail_agree_negative's, and the
# checks of damaged rank files and manifests (read.c, manifest.c) are the
# fuzz pass's (fuzz_export, fuzz_manifest), both under the sanitizers.
zt_label(full fail_disagree fail_kill_during_save fail_damage)

# Mixed precision (tests/mpi/zt_precision_test.py): fp16 stages bitwise
# (bf16's are the mpi_stages_np* tests'), memory against fp32 and the
# planner, the reduce dtype, loss scaling, the non-finite guard, fp16
# resume and convergence.
zt_script_cases(zt_precision_test.py precision "mpi" 900
                stages memory reduce_dtype planner convergence loss_scale resume)
zt_label(quick precision_stages precision_reduce_dtype precision_loss_scale precision_resume)
# Three 400-step runs, 26 planner runs, the 4-layer d_model-256 runs of the
# memory case: precision_stages and the rest run the same code paths.
zt_label(full precision_convergence precision_planner precision_memory)

# The CUDA backend under mpirun, on the CPU emulator (ZT_CUDA=EMU builds).
if(ZT_CUDA_EMU)
  zt_script_cases(zt_mpi_test.py mpi "mpi;cuda;quick" 900
                  cuda_emu_stages cuda_emu_bf16 cuda_emu_overlap cuda_emu_resume cuda_emu_gpt2_block cuda_emu_oom
                  cuda_emu_attention_fused cuda_emu_nccl_fails cuda_emu_startup_fails_one_rank)
  # One process at a time and no mpirun: the emulator pass (ctest -j 2) runs
  # it beside test_cuda_ops, whose emulated kernels take one core.
  set_tests_properties(mpi_cuda_emu_gpt2_block PROPERTIES RUN_SERIAL FALSE)
endif()

# The delayed parameter update (tests/mpi/zt_offload_delay_test.py): refused
# without offload, really one step stale, stages bitwise, resume bitwise, the
# planner's host bytes, convergence on the default model.
zt_script_cases(zt_offload_delay_test.py offload_delay "mpi" 900 refused stale stages resume planner convergence)
zt_label(quick offload_delay_refused offload_delay_stale offload_delay_resume)
zt_label(full offload_delay_planner offload_delay_convergence)
# bf16 under the delay (16-bit params written back a step late) is this
# case's alone.
zt_label(full offload_delay_stages)
zt_label(asan offload_delay_stages)

# DeepSpeed's stage-3 knobs (tests/mpi/zt_stage3_knobs_test.py): persistent
# units, the cap on live gathered parameters, the reuse distance and the
# optimizer's sub-group size; each bitwise equal to the run without it, with
# zt-plan exact. Quick: each knob is its own C path, in 2-5 runs.
zt_script_cases(zt_stage3_knobs_test.py stage3_knobs "mpi;quick" 900 persist max_live reuse sub_group)

# What the optimizer keeps (tests/mpi/zt_optimizer_test.py): SGD with
# momentum beside AdamW: stages and offload bitwise, optimizer bytes per rank,
# the planner, resume, convergence; frozen units; zt-plan's largest
# micro-batch and sequence length under --mem-limit.
zt_script_cases(zt_optimizer_test.py optimizer "mpi" 900 stages bytes planner resume convergence freeze max_batch)
zt_label(quick optimizer_stages optimizer_resume optimizer_freeze)
# 36 runs of byte accounting, the planner's arithmetic, 400 steps, and
# zt-plan's search (its --mem-limit refusals are test_accounting's too).
zt_label(full optimizer_bytes optimizer_planner optimizer_convergence optimizer_max_batch)

# Adafactor and 8-bit Adam (tests/mpi/zt_optimizer_state_test.py): stages,
# offload and bf16 bitwise; optimizer bytes per rank against a closed form
# and zt-plan --rank; resume; resharding; convergence.
zt_script_cases(zt_optimizer_state_test.py optimizer_state "mpi" 900
                stages stages_12 stages_more bytes resume reshard convergence)
zt_label(quick optimizer_state_stages)
# Resume's C paths (each optimizer's checkpoint blocks written and read) are
# optim_conformance's save/load/reshard round trips under the sanitizers.
zt_label(full optimizer_state_resume)
# The sanitizer pass runs the code paths (stages 0 and 3 with offload,
# resume); stages 1 and 2 (the state sharded as at stage 3), the byte counts
# (64 runs), bf16 and the delayed update, resharding and the convergence run
# are the normal build's.
zt_label(full optimizer_state_stages_12 optimizer_state_bytes optimizer_state_stages_more optimizer_state_reshard
              optimizer_state_convergence)
if(ZT_CUDA_EMU)
  zt_script_cases(zt_optimizer_state_test.py optimizer_state "mpi;cuda;quick" 900 cuda_emu)
endif()

# Muon (tests/mpi/zt_muon_test.py): stages and offload bitwise at np 2-4,
# owners balanced, zt-plan --rank exact, resume and reshard, bad settings,
# convergence on 0.56x AdamW's state. Quick: np 3's stages (the exchange and
# Newton-Schulz under the sanitizers) and resume's blocks; the refusals
# (full, and asan for the cap check's C path) start no training.
zt_script_cases(zt_muon_test.py muon "mpi" 900 stages stages_np24 planner resume bad convergence)
zt_label(quick muon_stages muon_resume)
zt_label(full muon_bad muon_stages_np24 muon_planner muon_convergence)
zt_label(asan muon_bad)
if(ZT_CUDA_EMU)
  zt_script_cases(zt_muon_test.py muon "mpi;cuda;quick" 900 cuda_emu)
endif()

# Low-memory state (tests/mpi/zt_low_memory_test.py): --master-dtype none
# and --optim-state-dtype bf16 for AdamW, SGD and Muon: stages bitwise,
# zt-plan --rank exact, resume bitwise, refusals, convergence on half the
# model state. Quick: the stages (the widening and stochastic rounding under
# the sanitizers) and resume's blocks in bf16; the refusals (full, and asan
# for the checks' C paths) start no training.
zt_script_cases(zt_low_memory_test.py low_memory "mpi" 900 stages planner resume bad convergence)
zt_label(quick low_memory_stages low_memory_resume)
zt_label(full low_memory_bad low_memory_planner low_memory_convergence)
zt_label(asan low_memory_bad)
if(ZT_CUDA_EMU)
  zt_script_cases(zt_low_memory_test.py low_memory "mpi;cuda;quick" 900 cuda_emu)
endif()

# The device allocator's modes (tests/mpi/zt_allocator_test.py): caching
# and expandable against simple, bitwise and per category; the free-block
# figures; caching's fragmentation OOM under --seq-len-jitter and a cap;
# --metrics-file; zt-plan's peak and expected reserved bytes under each mode.
zt_script_cases(zt_allocator_test.py allocator "mpi" 600 modes fragmentation metrics planner)
zt_label(quick allocator_metrics)
# Under the sanitizers the caching and expandable modes' code is
# test_mem_caching's (random allocation sequences against the invariants)
# and allocator_metrics' (caching inside training); the modes compared
# bitwise over 9 runs, the jittered model's searches for a cap and the
# planner's bands are the normal build's.
zt_label(full allocator_modes allocator_fragmentation allocator_planner)
if(ZT_CUDA_EMU) # expandable segments through the driver's VMM calls, on the emulator
  zt_script_cases(zt_allocator_test.py allocator "mpi;cuda;quick" 600 cuda_emu)
endif()

# zt-plan's replay (tests/mpi/zt_replay_test.py): its reserved bytes
# against the runs it plans, under each allocator; its largest micro-batch,
# sequence length and layer count at the boundary under a cap. Quick: the
# dry backend's and communicator's C paths in one replay per allocator.
zt_script_cases(zt_replay_test.py replay "mpi" 900 grid boundary quick)
zt_label(quick replay_quick)
zt_label(full replay_grid replay_boundary)
if(ZT_CUDA_EMU) # the replay shaped like CUDA against the CUDA backend on the emulator
  zt_script_cases(zt_replay_test.py replay "mpi;cuda;quick" 600 cuda_emu)
endif()

# The CPU backend's modelled host-device link (tests/mpi/zt_link_test.py):
# bandwidth per direction, overlap on the copy streams, zt-plan's transfer
# bytes and times, refusals; on the emulator, CUDA's refusal.
zt_script_cases(zt_link_test.py link "mpi" 600 bandwidth overlap planner refused)
zt_label(quick link_bandwidth link_overlap)
# Refusals: a few checks before anything is allocated (runtime/backend.c).
zt_label(full link_refused)
zt_label(full link_planner)
if(ZT_CUDA_EMU)
  zt_script_cases(zt_link_test.py link "mpi;cuda;quick" 300 cuda_emu)
endif()

# Parameter offload at stage 3 (tests/mpi/zt_offload_params_test.py):
# bitwise, bytes on device, host and link against zt-plan, checkpoints,
# refusals; on the emulator, bitwise with pinned shards.
zt_script_cases(zt_offload_params_test.py offload_params "mpi" 600 bitwise resume refused)
zt_label(quick offload_params_resume)
zt_label(full offload_params_refused) # checks before any allocation: under the sanitizers, offload_delay_refused's exit
# The comparisons over np 1-3 and dtypes: resume runs the same shards in.
zt_label(full offload_params_bitwise)
if(ZT_CUDA_EMU)
  zt_script_cases(zt_offload_params_test.py offload_params "mpi;cuda;quick" 600 cuda_emu)
endif()

# Activation offload (tests/mpi/zt_offload_activations_test.py): bitwise
# --recompute full alone (also with deferred copies), the device
# activations peak and the host pool against the closed form, zt-plan
# exact on device, host and link bytes, refusals; on the emulator, bitwise
# behind real stream events.
zt_script_cases(zt_offload_activations_test.py offload_activations "mpi" 300
                bitwise bitwise_np13 memory planner refused)
zt_label(quick offload_activations_bitwise)
# Refusals: option checks in train/train_config.c, before any allocation.
zt_label(full offload_activations_refused)
# np 1 and 3 run the code np 2 runs (the kept inputs are per rank, not per
# shard); sizes and the planner's arithmetic over the runs bitwise makes.
zt_label(full offload_activations_bitwise_np13 offload_activations_memory offload_activations_planner)
if(ZT_CUDA_EMU)
  zt_script_cases(zt_offload_activations_test.py offload_activations "mpi;cuda;quick" 300 cuda_emu)
endif()

# The NVMe tier (tests/mpi/zt_offload_nvme_test.py): bitwise host offload
# with the state and shards in a swap file, host bytes and I/O against
# zt-plan, VmHWM, an I/O error that stops every rank, the I/O path in the
# log, checkpoints, refusals; on the emulator, bitwise over NCCL.
zt_script_cases(zt_offload_nvme_test.py offload_nvme "mpi" 600 bitwise memory io_error io_paths resume refused)
zt_label(quick offload_nvme_io_error offload_nvme_io_paths offload_nvme_resume)
# Refusals: the engine's checks at init, before the file exists.
zt_label(full offload_nvme_refused)
# The comparisons over many runs, and the VmHWM measure (which the
# sanitizers' own memory would blur); the quick cases run the same stream.
zt_label(full offload_nvme_bitwise offload_nvme_memory)
if(ZT_CUDA_EMU)
  zt_script_cases(zt_offload_nvme_test.py offload_nvme "mpi;cuda;quick" 600 cuda_emu)
endif()

# Several hosts (tests/mpi/zt_hosts_test.py): the collective watchdog on one
# host; simulated hosts (launch/sim-hosts: network namespaces, needs root)
# for node-aware ranks and a link taken down mid-run. Those cases exit 77,
# reported as skipped with the reason, where namespaces cannot be made.
zt_script_cases(zt_hosts_test.py hosts "mpi" 300 watchdog sim_hosts hybrid_node link_bytes hpz link_down)
set_tests_properties(hosts_sim_hosts hosts_hybrid_node hosts_link_bytes hosts_hpz hosts_link_down PROPERTIES SKIP_RETURN_CODE 77)
zt_label(quick hosts_watchdog hosts_sim_hosts)
# Node groups run the code of hybrid_stages and hybrid_reshard (groups given
# by size) once hosts_sim_hosts has found the nodes; these compare bytes on
# the links. hosts_link_down waits out two timeouts.
zt_label(full hosts_hybrid_node hosts_link_bytes hosts_hpz hosts_link_down)
if(ZT_CUDA_EMU) # the device half of the watchdog: a stalled peer's NCCL collective on a stream
  zt_script_cases(zt_hosts_test.py hosts "mpi;cuda;quick" 300 watchdog_cuda_emu)
endif()

# Hybrid sharding on one host (tests/mpi/zt_hybrid_test.py): stages 0-3
# bitwise at np 4 in groups of 2, the closed form and zt-plan per rank, a
# hybrid checkpoint resumed without groups, refusals and DeepSpeed's key.
# Quick: the replica groups' and hpZ's code is theirs alone; the refusals
# are full (checks before any allocation: under the sanitizers their error
# exit is offload_delay_refused's).
zt_script_cases(zt_hybrid_test.py hybrid "mpi" 300 stages resume refused reshard)
zt_label(quick hybrid_stages hybrid_resume hybrid_reshard)
zt_label(full hybrid_refused)
if(ZT_CUDA_EMU) # NCCL groups on the emulator
  zt_script_cases(zt_hybrid_test.py hybrid "mpi;cuda;quick" 300 cuda_emu)
endif()

# The whole bill per rank (tests/mpi/zt_bill_test.py, docs/memory.md): the
# reconciliation at np 2 and 3 on the issue's configuration (full: the
# sanitizers' own mappings are unexplained by design; test_proc_mem runs
# the sampler's C paths under them), and the OOM report's bill (quick).
# The leak watch: ZT_TEST_LEAK named within 2K steps, a clean 400-step run
# never (full: hundreds of steps; test_leak_watch runs its C paths quick).
# zt-plan's process total and node Pss against a run (full: the sanitizers' shadow memory is in the OS's view).
zt_script_cases(zt_bill_test.py bill "mpi" 600 reconcile oom leak clean plan)
zt_label(quick bill_oom)
zt_label(full bill_reconcile bill_leak bill_clean bill_plan)
if(ZT_CUDA_EMU) # the GPU's bill (NVML absent on the emulator: the total not_measured)
  zt_script_cases(zt_bill_test.py bill "mpi;cuda;quick" 600 device_emu)
endif()

# The sanitizer build compares the stage-repeated checks at stages 0 and 3
# only (tests/mpi/zt_harness.py, STAGES_COMPARED; tests/MERGED.md).
if(ZT_SANITIZE)
  set_property(TEST mpi_stages_np2 mpi_stages_np3 hybrid_stages optimizer_stages optimizer_freeze
               APPEND PROPERTY ENVIRONMENT ZT_TEST_SANITIZED=1)
endif()

# Preemption and storage faults (tests/mpi/zt_preempt_test.py): signals at
# seeded moments, a second signal during the save, --resume auto, the
# asynchronous save, saves failing through fs.c's hook and on a full tmpfs.
zt_script_cases(zt_preempt_test.py preempt "mpi" 600 quick signals second_signal storage enospc async_kill)
zt_label(quick preempt_quick)
# 22 runs of seeded signals, 10 of failing saves, a private tmpfs, a second
# signal, a kill on the writer thread: the quick case runs the signal's stop
# and save, --resume auto, the asynchronous writer and a failed save's
# clean-up under the sanitizers; the watcher's immediate exit and the
# fallback past a damaged checkpoint (a loop over zt_ckpt_load, fuzzed by
# fuzz_manifest) add little C of their own.
zt_label(full preempt_signals preempt_storage preempt_enospc preempt_second_signal preempt_async_kill)

# ZeRO++'s quantized communication (tests/mpi/zt_zeropp_test.py): qwZ and
# qgZ's bytes on the wire against the bf16 baseline (and on 2 simulated
# hosts, in two hops, needing root: skipped otherwise), stages bitwise with
# feedback, zt-plan --rank exact, resume bitwise, refusals, convergence
# within 0.05 nats. Quick: the stages (the codes' C paths under the
# sanitizers: every one the wire bytes' runs take too); the refusals (full,
# and asan) start no training.
zt_script_cases(zt_zeropp_test.py zeropp "mpi" 900 wire stages hosts planner resume bad convergence)
set_tests_properties(zeropp_hosts PROPERTIES SKIP_RETURN_CODE 77)
zt_label(quick zeropp_stages)
zt_label(full zeropp_wire zeropp_bad zeropp_hosts zeropp_planner zeropp_resume zeropp_convergence)
zt_label(asan zeropp_bad)
if(ZT_CUDA_EMU)
  zt_script_cases(zt_zeropp_test.py zeropp "mpi;cuda;quick" 900 cuda_emu)
endif()

# Sequence parallelism (tests/mpi/zt_seq_parallel_test.py): np N at P
# against np N/P at 1 for both families, stages 0 and 3, recomputation none
# and full (equiv); the activations per rank at P 2 against P 1 at seq 1024
# with zt-plan --rank exact (memory); 1000 positions over 3 ranks (uneven);
# checkpoints across P (resume); refusals (bad). Quick: P 2 against P 1 at
# stage 3 with selective recomputation and fused attention, the exchanges'
# C paths under the sanitizers.
zt_script_cases(zt_seq_parallel_test.py seqpar "mpi" 900 equiv quick memory uneven resume bad)
zt_label(quick seqpar_quick)
zt_label(full seqpar_equiv seqpar_memory seqpar_uneven seqpar_resume seqpar_bad)
if(ZT_CUDA_EMU)
  zt_script_cases(zt_seq_parallel_test.py seqpar "mpi;cuda;quick" 900 cuda_emu)
endif()

# Automatic configuration (tests/mpi/zt_auto_test.py): the search's choice
# against the brute-force optimum of a grid planned one configuration at a
# time with a made-up profile (search); bad profiles, budgets and axes
# (bad); zt-train --auto at np 2 and 3 and its flags reproducing it bitwise
# (train): quick, so the search and the profile reader run under the
# sanitizers. A budget nothing fits (none_fits) and --calibrate's profile
# (calibrate): full.
zt_script_cases(zt_auto_test.py auto "mpi" 600 search bad train none_fits calibrate)
zt_label(quick auto_search auto_bad auto_train)
zt_label(full auto_none_fits auto_calibrate)
