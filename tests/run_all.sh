#!/usr/bin/env bash
# Builds zerotrain twice and runs the whole CTest suite on each build:
#   build/       warnings as errors (-Wall -Wextra -Werror), the normal build
#   build-asan/  the same under AddressSanitizer + UndefinedBehaviorSanitizer
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
# The sanitizer pass skips the two longest scenarios (label "slow": the
# planner's 64 runs and the 400-step convergence), which the first pass ran,
# and the CUDA backend, which the first pass compiled and no GPU here can run.
run_suite build-asan "-LE slow" -DCMAKE_BUILD_TYPE=Debug -DZT_SANITIZE=ON -DZT_CUDA=OFF
echo "=== all suites passed"
