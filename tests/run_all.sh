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
# Run from the repository root (README: the test command).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
run_suite() {
  local dir=$1 ctest_args=$2; shift 2
  echo "=== configure $dir ($*)"
  cmake -S . -B "$dir" -DZT_WERROR=ON "$@" > "$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
  echo "=== build $dir"
  cmake --build "$dir" -j "$jobs"
  echo "=== test $dir"
  ctest --test-dir "$dir" --output-on-failure $ctest_args
}
mkdir -p build build-asan
run_suite build "" -DCMAKE_BUILD_TYPE=RelWithDebInfo
# LeakSanitizer stays on; OpenMP's and Open MPI's own one-time allocations are
# not ours, so leaks inside those libraries are suppressed.
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:fast_unwind_on_malloc=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# The sanitizer pass: the quick tier and the full tests labelled asan (C paths
# the quick ones miss); not the CUDA backend, which the first pass compiled
# and no GPU here can run.
run_suite build-asan "-L quick|asan" -DCMAKE_BUILD_TYPE=Debug -DZT_SANITIZE=ON -DZT_CUDA=OFF
unset LSAN_OPTIONS ASAN_OPTIONS UBSAN_OPTIONS
# The GPU code paths without a GPU: kernels against the CPU, and training
# under mpirun over emulated NCCL and host staging with stream jitter.
cuda_include=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")/../include
if [ -f "$cuda_include/cuda_runtime_api.h" ]; then
  mkdir -p build-emu
  run_suite build-emu "-L cuda" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZT_CUDA=EMU
else
  echo "=== build-emu skipped: no CUDA toolkit headers (the emulator needs cuda_runtime_api.h, not a GPU)"
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
  mkdir -p build-fuzz
  echo "=== configure build-fuzz"
  CC=clang cmake -S . -B build-fuzz -DZT_FUZZ=ON -DZT_CUDA=OFF -DZT_WERROR=ON > build-fuzz/configure.log 2>&1 ||
    { cat build-fuzz/configure.log; exit 1; }
  echo "=== build build-fuzz"
  cmake --build build-fuzz -j "$jobs" --target fuzz_config fuzz_manifest fuzz_export
  echo "=== test build-fuzz"
  ctest --test-dir build-fuzz --output-on-failure -L fuzz -j 2
else
  echo "=== build-fuzz skipped: $fuzz_skip"
fi
echo "=== all suites passed"
