#!/usr/bin/env bash
# Builds zerotrain twice and runs the whole CTest suite on each build:
#   build/       warnings as errors (-Wall -Wextra -Werror), the normal build
#   build-asan/  the same under AddressSanitizer + UndefinedBehaviorSanitizer
# Run from the repository root (README: the test command).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
run_suite() {
  local dir=$1; shift
  echo "=== configure $dir ($*)"
  cmake -S . -B "$dir" -DZT_WERROR=ON "$@" > "$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
  echo "=== build $dir"
  cmake --build "$dir" -j "$jobs"
  echo "=== test $dir"
  ctest --test-dir "$dir" --output-on-failure
}
mkdir -p build build-asan
run_suite build -DCMAKE_BUILD_TYPE=RelWithDebInfo
# LeakSanitizer stays on; OpenMP's and Open MPI's own one-time allocations are
# not ours, so leaks inside those libraries are suppressed.
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:fast_unwind_on_malloc=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DZT_SANITIZE=ON
echo "=== all suites passed"
