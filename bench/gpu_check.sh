#!/usr/bin/env bash
# GPU check of zerotrain, for a machine with one NVIDIA GPU (H100/H200, sm_90).
#   bench/gpu_check.sh OUT_DIR
# Builds for sm_90 and runs, writing a log and a short table into OUT_DIR:
#   1. every CUDA kernel against the CPU reference (tests/test_cuda_ops): the
#      fp32 table, and the bf16 and fp16 tables against the CPU's bf16 and
#      fp16 tables (its groups ending in 16);
#   2. 200 steps on the GPU in bf16 vs the CPU in fp32: loss curves within 2%;
#   3. stages 0-3 against each other at np=1, and at np=2 sharing the GPU
#      (MPI with host staging, since NCCL refuses two ranks on one GPU), and
#      the host-staging communicator's own test (tests/test_staged_pool.c);
#      offload (copy streams, CPU Adam) at stages 2 and 3 against no offload;
#   3c. per-kernel times at one GPT-2-small block's shapes (kernels_time.md);
#   3d. the offload tiers: the NVMe swap file against host offload, and the
#      kept inputs in the host pool against full recomputation, bitwise;
#   3f. the GPU's whole bill: NVML's total for the process split into the
#      allocator's reserved bytes, the CUDA context, cuBLAS, the backend's
#      buffers and NCCL, and zt-plan's replayed reserved against the run's;
#   3e. the Llama family: stages 0 and 3 and selective recomputation bitwise,
#      the GPU's loss curve against the CPU's;
#   4. a GPT-2-small-sized run (12 layers, d_model 768, 12 heads, seq 1024) at
#      world size 1: tokens/s, MFU against the measured bf16 GEMM peak, and
#      per-rank peak memory, on the bf16 kernel table (no unit widened to an
#      "fp32 view"; activations half of fp32's but for the fp32 statistics);
#      4b. the same with --attention fused (memory saved,
#      speed paid, losses within 1%);
#   5. compute-sanitizer's racecheck and memcheck on the kernel test, for at
#      most 240 s (where the machine lets the sanitizer attach).
# Budget: under 8 minutes.
#
# On a machine without zerotrain's dependencies (Open MPI, OpenBLAS,
# jansson, xxhash and their headers), such as the lent H200 machine, carry
# .gpu-kit.tar.gz (launch/make_gpu_kit.sh makes it: the programs prebuilt for
# sm_90 and the libraries they need); the script unpacks it, sources its
# env.sh and uses its programs instead of building. Without a kit it builds
# here, which needs those dependencies installed.
#
# ZT_GPU_CHECK_EMU=1 bench/gpu_check.sh OUT_DIR is a dry run on the CPU
# emulator (tests/cuda_emu; no GPU needed, about 4 minutes on 2 cores) at
# smaller sizes: it checks the script itself (every step runs and its table
# row is written) before GPU time is spent on it. Its numbers mean nothing.
set -uo pipefail
emu=${ZT_GPU_CHECK_EMU:-0}
out=${1:?usage: bench/gpu_check.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
exec > >(tee "$out/gpu_check.log") 2>&1
start=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - start )) s] $*"; }
fail=0
result() { echo "| $1 | $2 | $3 |" >> "$out/results.md"; [ "$2" = PASS ] || [ "$2" = INFO ] || fail=1; }
echo "| check | status | detail |" > "$out/results.md"
echo "|---|---|---|" >> "$out/results.md"
# Sizes: the GPU's, or the dry run's.
steps_curve=200 steps_stages=20 kernel_shape="" gemm_args="8192 50"
# GPT-2 small: 12 layers, vocabulary 50257 with the LM head tied to the
# token embedding, 124.4M parameters (zt-plan prints 1.244e+08).
gpt2=(--layers 12 --vocab 50257 --micro-batch 8 --steps 12 --warmup 2) gpt2_layers=12
if [ "$emu" = 1 ]; then
  steps_curve=30 steps_stages=5 kernel_shape="2 128 64 4 64 2" gemm_args="256 2"
  gpt2=(--layers 1 --vocab 2048 --micro-batch 1 --steps 3 --warmup 1) gpt2_layers=1
  export ZT_EMU_DEVICES=1 # one GPU, as on the H200 machine: np=2 shares it through host staging
  result "EMULATOR DRY RUN (ZT_GPU_CHECK_EMU=1): checks the script, not a GPU" INFO "smaller sizes; timings mean nothing"
fi

stamp "environment"
if [ "$emu" != 1 ]; then
  # compute_mode: np=2 on one GPU needs Default (EXCLUSIVE_PROCESS refuses the second rank)
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_mode --format=csv,noheader || true
  nvcc --version | tail -1
fi
(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"); ldd --version 2>&1 | head -1
kit=0
if [ "$emu" != 1 ] && [ -f .gpu-kit.tar.gz ]; then
  # Unpacked afresh every time: a machine kept warm between calls keeps
  # ignored files, and an older kit must not stand in for the one carried.
  rm -rf .gpu-kit && tar -xzf .gpu-kit.tar.gz || echo "could not unpack .gpu-kit.tar.gz"
fi
if [ "$emu" != 1 ] && [ -f .gpu-kit/env.sh ]; then
  stamp "prebuilt programs and libraries from .gpu-kit"
  result "programs from the GPU kit" INFO "$(head -1 .gpu-kit/MANIFEST)"
  # Tried in a subshell first: a build must not inherit a failed kit's paths.
  # shellcheck disable=SC1091
  if (source .gpu-kit/env.sh) 2> "$out/kit.log"; then
    source .gpu-kit/env.sh
    kit=1
  elif mpicc --showme >/dev/null 2>&1; then
    cat "$out/kit.log"; echo "the kit cannot load here; building instead (Open MPI is installed)"
  else
    # No way to build either: keep the kit's programs, so the checks that
    # need no Open MPI (kernels, GEMM peak, per-kernel times) still run.
    source .gpu-kit/env.sh 2>/dev/null || true
    kit=1
    result "GPU kit loads here" FAIL "$(tr '\n' ' ' < "$out/kit.log")"
  fi
fi
if [ "$kit" = 1 ]; then
  bdir=.gpu-kit/build
elif [ "$emu" = 1 ]; then
  stamp "build (CUDA emulator)"
  bdir=build-gpu-emu
  cmake -S . -B $bdir -DCMAKE_BUILD_TYPE=Release -DZT_CUDA=EMU > "$out/configure.log" 2>&1 || { cat "$out/configure.log"; exit 1; }
else
  stamp "build (sm_90)"
  bdir=build-gpu
  nccl_root=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
  cmake -S . -B $bdir -DCMAKE_BUILD_TYPE=Release -DZT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        ${nccl_root:+-DNCCL_ROOT=$nccl_root} > "$out/configure.log" 2>&1 || { cat "$out/configure.log"; exit 1; }
fi
if [ "$kit" != 1 ]; then
  cmake --build $bdir -j "$(nproc)" > "$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
fi
zt=$bdir/examples/zt-train
run=launch/zt-run

stamp "1. kernels vs CPU"
if $bdir/tests/test_cuda_ops > "$out/kernels.log" 2>&1; then result "kernels vs CPU (fp32 < 1e-5, bf16 < 1e-2)" PASS "$(tail -1 "$out/kernels.log")"
else result "kernels vs CPU" FAIL "$(tail -3 "$out/kernels.log" | tr '\n' ' ')"; fi
# The bf16 and fp16 tables' share of it: ops against the CPU's 16-bit tables
# (2 ulps of max|cpu| for 16-bit outputs, 1e-5 for fp32 ones).
n16=$(grep -c -E '^ok .* (bf16|fp16)( |$)' "$out/kernels.log")
f16=$(grep -c -E '^FAIL .* (bf16|fp16)' "$out/kernels.log")
worst16=$(grep -o -E '[0-9.]+ ulps of max' "$out/kernels.log" | sort -g | tail -1 | cut -d' ' -f1)
if [ "$n16" -gt 0 ] && [ "$f16" = 0 ]; then
  result "bf16 and fp16 kernel tables vs the CPU's (<= 2 ulps)" PASS "$n16 checks, worst ${worst16:-?} ulps"
else
  result "bf16 and fp16 kernel tables vs the CPU's" FAIL "$n16 passed, $f16 failed"
fi

stamp "2. GPU bf16 vs CPU fp32, $steps_curve steps"
timeout 180 $zt --device cuda --dtype bf16 --steps $steps_curve --quiet --log-dir "$out/gpu_bf16" 2> "$out/gpu_bf16.err"
gpu_rc=$?
cat "$out/gpu_bf16.err" >&2
[ $gpu_rc = 0 ] &&
timeout 180 $zt --device cpu --dtype fp32 --steps $steps_curve --quiet --threads "$(nproc)" --log-dir "$out/cpu_fp32"
python3 - "$out" <<'PY' >> "$out/results.md" || fail=1
import json, sys
out = sys.argv[1]
try:
    g = json.load(open(f"{out}/gpu_bf16/summary.json"))["losses"]
    c = json.load(open(f"{out}/cpu_fp32/summary.json"))["losses"]
except Exception as e:
    print(f"| loss curve GPU bf16 vs CPU fp32 | FAIL | {e} |"); sys.exit(1)
# Curves compared on 10-step means (a single step's loss has a few % of noise).
n = len(c)
worst = max(abs(sum(g[i:i+10]) - sum(c[i:i+10])) / sum(c[i:i+10]) for i in range(0, n, 10))
status = "PASS" if worst <= 0.02 and len(g) == n else "FAIL"
print(f"| loss curve GPU bf16 vs CPU fp32 ({n} steps, 10-step means) | {status} | worst relative gap {worst:.2%} |")
sys.exit(0 if status == "PASS" else 1)
PY

# Which communicator the np=1 runs had: NCCL, or host staging when NCCL could
# not start (zt-train says why and goes on; the GPU checks still count).
if grep -q "NCCL not used" "$out/gpu_bf16.err" 2>/dev/null; then
  result "communicator at np=1" INFO "host staging: $(grep -m1 "NCCL not used" "$out/gpu_bf16.err" | tr '|' ' ')"
elif [ $gpu_rc = 0 ]; then
  result "communicator at np=1" INFO "NCCL"
else
  result "communicator at np=1" INFO "unknown: the GPU run failed (exit $gpu_rc)"
fi

stamp "3. stages at np=1 and np=2 (shared GPU)"
# Two ranks on one GPU need its Default compute mode: an exclusive mode
# admits one process (zt-train would stop at start-up, naming the rank).
mode=Default
[ "$emu" = 1 ] || mode=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2>/dev/null | head -1)
for np in 1 2; do
  if [ "$np" = 2 ] && [ "$mode" != Default ]; then
    result "stages 0-3 at np=2" INFO "skipped: the GPU's compute mode is '$mode', not Default"
    continue
  fi
  for s in 0 1 2 3; do
    timeout 120 $run -np $np $zt --device cuda --stage $s --steps $steps_stages --quiet --log-dir "$out/stages-np$np-s$s" 2>>"$out/stages.log"
  done
  python3 - "$out" $np <<'PY' >> "$out/results.md" || fail=1
import json, sys
out, np_ = sys.argv[1], sys.argv[2]
try:
    runs = [json.load(open(f"{out}/stages-np{np_}-s{s}/summary.json")) for s in range(4)]
except Exception as e:
    print(f"| stages 0-3 at np={np_} | FAIL | {e} |"); sys.exit(1)
same = all(r["losses"] == runs[0]["losses"] and r["params_digest"] == runs[0]["params_digest"] for r in runs)
print(f"| stages 0-3 bitwise at np={np_} (fp32) | {'PASS' if same else 'FAIL'} | digest {runs[0]['params_digest'][:12]} |")
sys.exit(0 if same else 1)
PY
  if [ "$np" = 2 ]; then
    # The host-staging communicator on its own: its values, and a pool that neither re-pins nor hoards.
    if timeout 60 $run -np 2 $bdir/tests/test_staged_pool > "$out/staged_pool.log" 2>&1; then
      result "host staging: values and pinned pool (np=2)" PASS "$(grep -m1 'pinned allocations' "$out/staged_pool.log")"
    else
      result "host staging: values and pinned pool (np=2)" FAIL "$(grep -m2 -E 'FAIL|rror' "$out/staged_pool.log" | tr '\n|' '  ')"
    fi
  fi
done

stamp "3b. offload on the GPU (copy streams, pinned buffers, CPU Adam)"
for s in 2 3; do
  timeout 120 $zt --device cuda --stage $s --offload cpu --steps $steps_stages --quiet --log-dir "$out/offload-s$s" 2>>"$out/stages.log"
done
python3 - "$out" <<'PY' >> "$out/results.md" || fail=1
import json, sys
out = sys.argv[1]
try:
    base = json.load(open(f"{out}/stages-np1-s3/summary.json"))["losses"]
    runs = {s: json.load(open(f"{out}/offload-s{s}/summary.json"))["losses"] for s in (2, 3)}
except Exception as e:
    print(f"| offload stages 2, 3 vs no offload (np=1) | FAIL | {e} |"); sys.exit(1)
# The CPU Adam and the GPU AdamW kernel round differently: compare curves, not bits.
worst = max(abs(a - b) / b for r in runs.values() for a, b in zip(r, base))
status = "PASS" if worst <= 0.01 and all(len(r) == len(base) for r in runs.values()) else "FAIL"
print(f"| offload stages 2, 3 vs no offload (np=1, {len(base)} steps) | {status} | worst relative loss gap {worst:.3%} |")
sys.exit(0 if status == "PASS" else 1)
PY

stamp "3b'. --allocator expandable through the driver's VMM calls (runtime/cuda/vmm.c)"
for a in caching expandable; do
  timeout 120 $zt --device cuda --stage 3 --steps $steps_stages --seq-len-jitter 0.5 --allocator $a --quiet \
    --log-dir "$out/alloc-$a" 2>>"$out/stages.log"
done
python3 - "$out" <<'PY' >> "$out/results.md" || fail=1
import json, sys
out = sys.argv[1]
try:
    c, e = (json.load(open(f"{out}/alloc-{a}/summary.json")) for a in ("caching", "expandable"))
    res = [max(json.loads(l)["memory"]["reserved_peak_bytes"] for l in open(f"{out}/alloc-{a}/rank0.jsonl"))
           for a in ("caching", "expandable")]
except Exception as ex:
    print(f"| expandable segments (VMM) vs caching | FAIL | {ex} |"); sys.exit(1)
same = c["losses"] == e["losses"] and c["params_digest"] == e["params_digest"]
ok = same and res[1] % (2 << 20) == 0 and res[1] <= res[0]
print(f"| expandable segments (VMM) vs caching, stage 3, jitter | {'PASS' if ok else 'FAIL'} | bitwise {same}; "
      f"reserved peak {res[1] / 2**20:.1f} MiB vs caching {res[0] / 2**20:.1f} MiB |")
sys.exit(0 if ok else 1)
PY

stamp "3f. the GPU's whole bill: NVML's total per part, and zt-plan's replayed reserved against the run's"
bill_flags=(--device cuda --stage 3 --steps $steps_stages --quiet)
timeout 120 $zt "${bill_flags[@]}" --log-dir "$out/bill" 2>>"$out/stages.log"
$bdir/examples/zt-plan --world 1 --json "${bill_flags[@]}" > "$out/bill-plan.json" 2>>"$out/stages.log"
python3 - "$out" <<'PY' >> "$out/results.md" || fail=1
import json, sys
out = sys.argv[1]
MIB = 2**20
try:
    s = json.load(open(f"{out}/bill/summary.json"))
    plan = json.load(open(f"{out}/bill-plan.json"))["expected_reserved"]
    d = s["ranks"][0]["device_process"]
    res = max(json.loads(l)["memory"]["reserved_peak_bytes"] for l in open(f"{out}/bill/rank0.jsonl"))
except Exception as ex:
    print(f"| the GPU's whole bill | FAIL | {ex} |"); sys.exit(1)
parts = ", ".join(f"{k} {v / MIB:.1f}" for k, v in d["parts"].items())
if "os_bytes" in d:
    adds = sum(d["parts"].values()) + d["unexplained_bytes"] == d["os_bytes"]
    other = d["os_bytes"] - d["parts"]["allocator_reserved"]
    print(f"| the GPU's whole bill (NVML), stage 3 | {'PASS' if adds else 'FAIL'} | {d['os_bytes'] / MIB:.1f} MiB: "
          f"{parts}, unexplained {d['unexplained_bytes'] / MIB:.1f} MiB; outside the allocator {other / MIB:.1f} MiB "
          f"(the GPU row for train/plan_process.c); other processes {d.get('other_processes')} |")
else:
    print(f"| the GPU's whole bill, stage 3 | INFO | total not measured ({', '.join(d['not_measured'])}); {parts} MiB |")
err = res / plan["bytes"] - 1
ok = plan["how"] == "replay" and abs(err) <= 0.01
print(f"| zt-plan's replayed reserved vs the GPU run's | {'PASS' if ok else 'FAIL'} | {plan['bytes'] / MIB:.2f} MiB "
      f"planned, {res / MIB:.2f} MiB measured ({err:+.2%}) |")
sys.exit(0 if ok and ("os_bytes" not in d or adds) else 1)
PY

stamp "3d. the offload tiers on the GPU (NVMe swap file, kept inputs on the host)"
# At np=1, stage 3: the state and shards in a swap file against host offload,
# and the kept block inputs in the host pool against full recomputation alone.
tier_flags="--device cuda --stage 3 --steps $steps_stages --quiet"
timeout 120 $zt $tier_flags --offload cpu --offload-params cpu --log-dir "$out/tier-host" 2>>"$out/stages.log"
timeout 120 $zt $tier_flags --offload nvme --offload-params nvme --nvme-path "$out/swap" --nvme-block-size 64KiB \
  --log-dir "$out/tier-nvme" 2>>"$out/stages.log"
timeout 120 $zt $tier_flags --recompute full --log-dir "$out/tier-recompute" 2>>"$out/stages.log"
timeout 120 $zt $tier_flags --recompute full --offload-activations cpu --log-dir "$out/tier-acts" 2>>"$out/stages.log"
python3 - "$out" <<'PY' >> "$out/results.md" || fail=1
import json, sys
out, ok = sys.argv[1], True
for name, a, b in (("--offload nvme vs cpu", "tier-host", "tier-nvme"),
                   ("--offload-activations cpu vs recompute alone", "tier-recompute", "tier-acts")):
    try:
        x, y = (json.load(open(f"{out}/{d}/summary.json")) for d in (a, b))
    except Exception as e:
        print(f"| {name} (np=1, stage 3) | FAIL | {e} |"); ok = False; continue
    same = x["losses"] == y["losses"] and x["params_digest"] == y["params_digest"]
    ok &= same
    print(f"| {name} (np=1, stage 3) | {'PASS' if same else 'FAIL'} | device peak {x['ranks'][0]['peak_bytes'] / 2**20:.1f} "
          f"-> {y['ranks'][0]['peak_bytes'] / 2**20:.1f} MiB, host {x['ranks'][0]['host_peak_bytes'] / 2**20:.1f} -> "
          f"{y['ranks'][0]['host_peak_bytes'] / 2**20:.1f} MiB |")
sys.exit(0 if ok else 1)
PY

stamp "3g. the step-time model's profile of this GPU (zt-plan --calibrate; docs/auto.md)"
# The measured profile replaces the built-in cuda table (vendor peaks x 0.6):
# zt-plan --profile OUT/profile.json and zt-train --auto --profile use it.
if [ "$emu" = 1 ]; then
  result "zt-plan --calibrate --device cuda" INFO "GPU only"
elif timeout 60 $bdir/examples/zt-plan --calibrate "$out/profile.json" --device cuda > "$out/calibrate.log" 2>&1; then
  result "zt-plan --calibrate --device cuda (profile.json)" PASS "$(python3 - "$out/profile.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
g, a = p["gemm_flops"], p["attention_flops"]["materialized"]["forward"]
print("bf16 GEMM %.0f TFLOP/s large, fp32 %.0f; attention %.1f TFLOP/s; pointwise %.0f GB/s; launch %.1f us; "
      "Adam %.3g elements/s" % (g["bf16"]["large"] / 1e12, g["fp32"]["large"] / 1e12, a / 1e12,
                                 p["pointwise_gbs"], 1e6 * p["kernel_overhead_s"], p["adam_device_eps"]))
PY
)"
else
  result "zt-plan --calibrate --device cuda" FAIL "$(tail -2 "$out/calibrate.log" | tr '\n|' '  ')"
fi

stamp "3c. per-kernel times at GPT-2-small block shapes"
if timeout 120 $bdir/bench/bench_kernels $kernel_shape > "$out/kernels_time.md" 2>&1; then
  result "per-kernel times ($(head -1 "$out/kernels_time.md"))" INFO "table in kernels_time.md"
else
  result "per-kernel times" FAIL "$(tail -2 "$out/kernels_time.md" | tr '\n' ' ')"
fi

stamp "3e. the Llama family on the GPU (RMSNorm, RoPE, SwiGLU, grouped-query attention)"
# At np=1: stages 0 and 3 bitwise, selective recomputation bitwise against
# keeping everything, and the GPU's fp32 loss curve against the CPU's
# within 1% (the kernels round differently: curves, not bits).
llama_flags="--model llama --kv-heads 2 --steps $steps_stages --quiet"
for v in "s0:--device cuda --stage 0" "s3:--device cuda --stage 3" "sel:--device cuda --stage 3 --recompute selective" \
         "cpu:--device cpu --stage 3"; do
  timeout 120 $zt $llama_flags ${v#*:} --log-dir "$out/llama-${v%%:*}" 2>>"$out/stages.log"
done
python3 - "$out" <<'PY' >> "$out/results.md" || fail=1
import json, sys
out = sys.argv[1]
try:
    r = {k: json.load(open(f"{out}/llama-{k}/summary.json")) for k in ("s0", "s3", "sel", "cpu")}
except Exception as e:
    print(f"| llama: stages, recompute, GPU vs CPU | FAIL | {e} |"); sys.exit(1)
same = all(r[k]["losses"] == r["s0"]["losses"] and r[k]["params_digest"] == r["s0"]["params_digest"]
           for k in ("s3", "sel"))
gap = max(abs(a - b) / b for a, b in zip(r["s3"]["losses"], r["cpu"]["losses"]))
ok = same and gap <= 0.01
print(f"| llama: stages 0 = 3 = selective recompute (bitwise), GPU vs CPU fp32 | {'PASS' if ok else 'FAIL'} | "
      f"bitwise {same}; worst relative loss gap {gap:.3%} |")
sys.exit(0 if ok else 1)
PY

stamp "4. GPT-2-small timing"
peak=$($bdir/bench/bench_gemm $gemm_args | awk '/bf16_gemm_tflops/ {print $2}')
timeout 240 $zt --device cuda --dtype bf16 --d-model 768 --heads 12 --seq-len 1024 --tied 1 \
  "${gpt2[@]}" --quiet --trace 0 --log-dir "$out/gpt2s"
python3 - "$out" "${peak:-0}" "$gpt2_layers" <<'PY' >> "$out/results.md"
import json, sys
out, peak, L = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
try:
    s = json.load(open(f"{out}/gpt2s/summary.json"))
except Exception as e:
    print(f"| GPT-2-small timing | FAIL | {e} |"); sys.exit(1)
P, tps, C, T = s["params"], s["tokens_per_s"], 768, 1024
# Model FLOPs per token: 6 per parameter that takes part in a GEMM (all but
# the position embedding, a lookup; the tied token embedding counts once,
# for the LM head) plus 12 L C T for attention's two T x T products, forward
# and backward (the PaLM convention, full rather than causal).
flops = (6 * (P - T * C) + 12 * L * C * T) * tps
mfu = flops / (peak * 1e12) if peak > 0 else float("nan")
r = s["ranks"][0]
try:  # the driver's view (cudaMemGetInfo) after the last step
    last = json.loads(open(f"{out}/gpt2s/rank0.jsonl").read().splitlines()[-1])
    driver = f", driver used {last['memory']['driver']['used_bytes']/2**30:.2f} GiB"
except Exception:
    driver = ""
print(f"| GPT-2-small ({L}x768, seq 1024, {P/1e6:.1f}M params, bf16, np=1) | INFO | {tps:.0f} tokens/s, MFU {mfu:.1%} of {peak:.0f} TFLOP/s bf16 GEMM peak, "
      f"peak memory {r['peak_bytes']/2**30:.2f} GiB (activations {r['peak_by_category']['activations']/2**30:.2f} GiB){driver} |")
PY

# The run above used the bf16 kernel table: a unit widened for fp32 kernels
# would have an "fp32 view" allocation, and activations in bf16 are about
# half of fp32's (the fp32 statistics aside).
python3 - "$out" <<'PY' >> "$out/results.md" || fail=1
import json, sys
out = sys.argv[1]
try:
    labels = json.load(open(f"{out}/gpt2s/labels_rank0.json"))["device"]
    s = json.load(open(f"{out}/gpt2s/summary.json"))
except Exception as e:
    print(f"| GPT-2-small runs on the bf16 kernels | FAIL | {e} |"); sys.exit(1)
views = [l["label"] for l in labels if "fp32 view" in l["label"]]
acts = sum(l["peak_bytes"] for l in labels if l["category"] == "activations")
status = "PASS" if labels and not views else "FAIL"
print(f"| GPT-2-small runs on the bf16 kernels (no fp32 view) | {status} | {len(views)} fp32 view labels of "
      f"{len(labels)}; activations peak {s['ranks'][0]['peak_by_category']['activations']/2**30:.2f} GiB "
      f"(labels: {acts/2**30:.2f} GiB) |")
sys.exit(0 if status == "PASS" else 1)
PY

stamp "4b. GPT-2-small with --attention fused (probabilities recomputed)"
timeout 240 $zt --device cuda --dtype bf16 --d-model 768 --heads 12 --seq-len 1024 --tied 1 \
  "${gpt2[@]}" --attention fused --quiet --trace 0 --log-dir "$out/gpt2s-fused"
python3 - "$out" <<'PY' >> "$out/results.md" || fail=1
import json, sys
out = sys.argv[1]
try:
    m = json.load(open(f"{out}/gpt2s/summary.json"))
    f = json.load(open(f"{out}/gpt2s-fused/summary.json"))
except Exception as e:
    print(f"| GPT-2-small, fused attention | FAIL | {e} |"); sys.exit(1)
gap = max(abs(a - b) / b for a, b in zip(f["losses"], m["losses"]))
status = "PASS" if gap <= 0.01 and len(f["losses"]) == len(m["losses"]) else "FAIL"
act = lambda s: s["ranks"][0]["peak_by_category"]["activations"] / 2**30
print(f"| GPT-2-small, fused attention vs materialized (losses within 1%) | {status} | {f['tokens_per_s']:.0f} vs "
      f"{m['tokens_per_s']:.0f} tokens/s, activations {act(f):.2f} vs {act(m):.2f} GiB, peak "
      f"{f['ranks'][0]['peak_bytes']/2**30:.2f} GiB, worst loss gap {gap:.2e} |")
sys.exit(0 if status == "PASS" else 1)
PY

stamp "5. compute-sanitizer (racecheck, memcheck) on the kernel test"
# What the emulator cannot show: shared-memory races under the GPU's real
# thread scheduling, and out-of-bounds accesses in the compiled kernels.
# After the measurements, for at most 240 s and within the budget (7.5
# minutes in all). The sanitizer attaches on Firecracker machines, not
# on gVisor ("Device not supported"): that, a missing sanitizer or too little
# time is an INFO row, not a failure; a hazard or bad access it reported
# before running out of time is a failure. API errors are not reported, and
# the groups that fail a launch on purpose (sticky_error) or only move
# 64 MiB around (stream_ordering) are left out.
sanitize() { # tool seconds
  local log="$out/sanitizer-$1.log" rc summary found libs
  # Our shared-memory kernels first, so that a run the budget stops has
  # checked them; the GEMM groups (mostly cuBLAS) last.
  local groups=layernorm,softmax_xent,attention,sum_squares,embedding,adamw,casts,pointwise,matmul,gemm_bf16
  # Hazards inside cuBLAS's own kernels (nvjet_*, cutlass, xmma) are not
  # ours, and its barriers order them: counted apart, not failed. (Leaving
  # them out with --kernel-name-exclude made racecheck fail internally on
  # an H200, "failed to handle a hardware exception", at a cuBLAS GEMM.)
  local lib='nvjet|cutlass|xmma|cublas|gemv|splitKreduce'
  timeout -k 10 "$2" "$san" --tool "$1" --report-api-errors no --error-exitcode 9 \
    $bdir/tests/test_cuda_ops $groups > "$log" 2>&1
  rc=$?
  summary=$(grep -E "(ERROR|RACECHECK) SUMMARY" "$log" | tail -1 | sed 's/^=* *//')
  found=$(grep -E "^=+ +(Error|Invalid|Race|Misaligned|Out-of-range|Barrier)" "$log" |
          grep -v -E -e "Device not supported" -e "terminate successfully" -e "$lib" | head -1 | sed 's/^=* *//' |
          tr '|' ' ')
  libs=$(grep -E "^=+ +(Error|Invalid|Race)" "$log" | grep -c -E "$lib")
  if grep -q "Device not supported" "$log"; then
    result "compute-sanitizer $1 on test_cuda_ops" INFO "cannot attach on this machine: Device not supported"
  elif grep -q "Internal Sanitizer Error" "$log"; then
    result "compute-sanitizer $1 on test_cuda_ops" INFO "the sanitizer itself failed: $(grep -m1 'Internal Sanitizer Error' "$log" | sed 's/^=* *//' | tr '|' ' ') (sanitizer-$1.log)"
  elif [ -n "$found" ]; then
    result "compute-sanitizer $1 on test_cuda_ops" FAIL "exit $rc: $found (sanitizer-$1.log)"
  elif [ $rc = 124 ] || [ $rc = 137 ]; then
    result "compute-sanitizer $1 on test_cuda_ops" INFO "stopped after $2 s (the budget), nothing reported in our kernels ($libs reports inside cuBLAS's) up to: $(grep -E '^(ok|FAIL) ' "$log" | tail -1 | cut -c1-60 | tr '|' ' ')"
  elif [ $rc = 77 ]; then
    result "compute-sanitizer $1 on test_cuda_ops" INFO "the test saw no GPU under the sanitizer"
  elif [ -z "$summary" ]; then
    result "compute-sanitizer $1 on test_cuda_ops" INFO "did not run here (exit $rc): $(grep -v '^ok' "$log" | head -2 | tr '\n|' '  ')"
  elif [ $rc = 0 ] || { [ $rc = 9 ] && [ "$libs" -gt 0 ] && ! grep -q -E '^FAIL ' "$log"; }; then
    result "compute-sanitizer $1 on test_cuda_ops" PASS "nothing in our kernels ($libs reports inside cuBLAS's); $(grep -E '^[0-9]+ checks' "$log" | tail -1)"
  else
    result "compute-sanitizer $1 on test_cuda_ops" FAIL "exit $rc: $summary (sanitizer-$1.log)"
  fi
}
if [ "$emu" = 1 ]; then
  result "compute-sanitizer on test_cuda_ops" INFO "GPU only"
else
  san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  # At most 240 s in all, ending by 450 s: the device time of a session must
  # leave room for a rerun after a fix. On an H200 the checks above take
  # about 60 s and memcheck over the whole test about 10 s; racecheck, which
  # instruments every cuBLAS kernel too, takes the rest.
  san_end=$(( $(date +%s) - start + 240 ))
  [ $san_end -gt 450 ] && san_end=450
  left=$(( san_end - ($(date +%s) - start) ))
  if [ -z "$san" ]; then
    result "compute-sanitizer on test_cuda_ops" INFO "not installed"
  elif [ $left -lt 60 ]; then
    result "compute-sanitizer on test_cuda_ops" INFO "skipped: $left s left of the budget"
  else
    # racecheck first: races are what the emulator cannot show at all.
    sanitize racecheck $(( left - 40 ))
    left=$(( san_end - ($(date +%s) - start) ))
    if [ $left -ge 30 ]; then sanitize memcheck $left
    else result "compute-sanitizer memcheck on test_cuda_ops" INFO "skipped: $left s left of the budget"; fi
  fi
fi

stamp "done"
cat "$out/results.md"
exit $fail
