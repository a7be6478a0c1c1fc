#!/usr/bin/env bash
# Builds zerotrain four times and runs CTest on each build:
#   build/       warnings as errors (-Wall -Wextra -Werror), the normal build:
#                every test (labels quick and full)
#   build-asan/  the same under AddressSanitizer + UndefinedBehaviorSanitizer:
#                the tests labelled quick, plus the full ones labelled asan
#   build-emu/   the CUDA backend on the CPU emulator (tests/cuda_emu), when
#                the CUDA toolkit's headers are here: the tests labelled cuda
#   build-fuzz/  Clang with libFuzzer, ASan and UBSan: the three fuzz
#                harnesses of tests/fuzz, each for a fixed seed and run count
#                (label fuzz), two at a time; skipped when clang or its
#                libFuzzer runtime (libclang-rt-14-dev) is missing
# The tiers (tests/CMakeLists.txt says more): every test is labelled either
# quick (every pass that builds it runs it) or full (the normal build's
# alone: matrices of many runs, convergence, measurements the sanitizers
# would blur); a full test whose C paths no quick test runs is labelled asan
# too, and each cmake file says why a test is where it is.
# At the end: each pass's wall time (configure + build, tests, both), then
# the CTest summary of every pass that ran, the failing one's last; the exit
# status is non-zero when any configure, build or test failed.
# Run from the repository root (README: the test command).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
t_all=$SECONDS
passes=()      # "dir build_s test_s" per pass that ran, or "dir skipped: why"

# The table and the CTest summaries, also when a pass fails (set -e ends the
# script there): CTest's own summary lines stay the last of the output.
report() {
  local rc=$?
  echo "=== pass times (wall seconds)"
  printf '%-12s %8s %8s %8s\n' pass build test total
  local p dir b t
  for p in "${passes[@]}"; do
    read -r dir b t <<< "$p"
    if [ "$b" = "skipped:" ]; then
      printf '%-12s %s\n' "$dir" "${p#"$dir "}"
    else
      printf '%-12s %8s %8s %8s\n' "$dir" "$b" "$t" $(( b + t ))
    fi
  done
  printf '%-12s %26s\n' all $(( SECONDS - t_all ))
  if [ "$rc" -eq 0 ]; then echo "=== all suites passed"; else echo "=== FAILED (exit $rc)"; fi
  for p in "${passes[@]}"; do
    read -r dir b t <<< "$p"
    [ -f "$dir/ctest.log" ] && [ "$b" != "skipped:" ] || continue
    echo "=== CTest summary of $dir"
    # From CTest's "% tests passed" line to its end (the failed tests' list).
    sed -n '/% tests passed, /,$p' "$dir/ctest.log"
  done
  exit "$rc"
}
trap report EXIT

# run_suite DIR "CTEST ARGS" [CMAKE ARGS...]: configure, build, test; the
# pass's times go to passes[] as soon as each part ends.
run_suite() {
  local dir=$1 ctest_args=$2; shift 2
  local t0=$SECONDS b
  mkdir -p "$dir"
  rm -f "$dir/ctest.log"
  passes+=("$dir 0 0")
  echo "=== configure $dir ($*)"
  cmake -S . -B "$dir" -DZT_WERROR=ON "$@" > "$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
  echo "=== build $dir"
  if [ "$dir" = build-fuzz ]; then
    cmake --build "$dir" -j "$jobs" --target fuzz_config fuzz_manifest fuzz_export
  else
    cmake --build "$dir" -j "$jobs"
  fi
  b=$(( SECONDS - t0 ))
  passes[-1]="$dir $b 0"
  echo "=== test $dir"
  t0=$SECONDS
  # shellcheck disable=SC2086 # ctest_args is a list of words
  ctest --test-dir "$dir" --output-on-failure $ctest_args 2>&1 | tee "$dir/ctest.log" ||
    { passes[-1]="$dir $b $(( SECONDS - t0 ))"; exit 1; }
  passes[-1]="$dir $b $(( SECONDS - t0 ))"
}

# Two at a time: the tests that start no mpirun or start few ranks run side by
# side; every test of many ranks is RUN_SERIAL and runs alone.
run_suite build "-j $jobs" -DCMAKE_BUILD_TYPE=RelWithDebInfo
# LeakSanitizer stays on; OpenMP's and Open MPI's own one-time allocations are
# not ours, so leaks inside those libraries are suppressed.
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:fast_unwind_on_malloc=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# The sanitizer pass: the quick tier and the full tests labelled asan (C paths
# the quick ones miss); not the CUDA backend, which the first pass compiled
# and no GPU here can run.
run_suite build-asan "-L quick|asan -j $jobs" -DCMAKE_BUILD_TYPE=Debug -DZT_SANITIZE=ON -DZT_CUDA=OFF
unset LSAN_OPTIONS ASAN_OPTIONS UBSAN_OPTIONS
# The GPU code paths without a GPU: kernels against the CPU, and training
# under mpirun over emulated NCCL and host staging with stream jitter.
cuda_include=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")/../include
if [ -f "$cuda_include/cuda_runtime_api.h" ]; then
  # Two at a time: the tests that start no mpirun (the kernel tables, the
  # GPT-2 block) run side by side; the mpirun ones are RUN_SERIAL.
  run_suite build-emu "-L cuda -j 2" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZT_CUDA=EMU
else
  echo "=== build-emu skipped: no CUDA toolkit headers (the emulator needs cuda_runtime_api.h, not a GPU)"
  passes+=("build-emu skipped: no CUDA toolkit headers")
fi
# The readers of untrusted input under libFuzzer: the config reader, the
# checkpoint manifest and the safetensors export's input path. Any crash,
# leak, sanitizer report or harness check fails the test.
fuzz_skip=""
if ! command -v clang > /dev/null 2>&1; then
  fuzz_skip="no clang"
elif ! echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }' |
       clang -x c -fsanitize=fuzzer -o /dev/null - > /dev/null 2>&1; then
  fuzz_skip="clang cannot link -fsanitize=fuzzer (no libclang_rt.fuzzer: install libclang-rt-14-dev)"
fi
if [ -z "$fuzz_skip" ]; then
  export CC=clang
  run_suite build-fuzz "-L fuzz -j 2" -DZT_FUZZ=ON -DZT_CUDA=OFF
  unset CC
else
  echo "=== build-fuzz skipped: $fuzz_skip"
  passes+=("build-fuzz skipped: $fuzz_skip")
fi
