#!/usr/bin/env bash
# Runs one fuzz target for longer than CI does, from the repository root:
#
#   tests/fuzz/run_long.sh TARGET SECONDS [LIBFUZZER_ARGS...]
#
# TARGET: fuzz_config, fuzz_manifest or fuzz_export. Configures build-fuzz/
# when it is not configured yet (CC=clang -DZT_FUZZ=ON -DZT_CUDA=OFF
# -DZT_WERROR=ON) and builds the target (nothing to do when it is up to
# date). Fuzzes with -max_total_time=SECONDS over a scratch copy of
# tests/fuzz/corpus/<name>/ in build-fuzz/fuzz-long/TARGET/corpus (the inputs
# it adds stay there, not in the source tree; copy the interesting ones into
# the corpus by hand), with the same sanitizer settings as CTest. Crashing inputs (crash-*, leak-*,
# timeout-*, oom-*) are kept in build-fuzz/fuzz-long/TARGET/crashes/, which
# the script names at the end; reproduce one with
#   build-fuzz/tests/fuzz/TARGET build-fuzz/fuzz-long/TARGET/crashes/crash-...
# Extra arguments go to libFuzzer (for example -jobs=2 -workers=2, -seed=7).
# Exit status: libFuzzer's (non-zero when it found something).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 2 ]; then
  sed -n '2,17p' "$0"
  exit 2
fi
target=$1 seconds=$2
shift 2
case "$target" in
  fuzz_config|fuzz_manifest|fuzz_export) ;;
  *) echo "run_long.sh: TARGET is fuzz_config, fuzz_manifest or fuzz_export, not '$target'" >&2; exit 2 ;;
esac
name=${target#fuzz_}
bin=build-fuzz/tests/fuzz/$target
if [ ! -f build-fuzz/CMakeCache.txt ]; then
  mkdir -p build-fuzz
  echo "=== configure build-fuzz"
  CC=clang cmake -S . -B build-fuzz -DZT_FUZZ=ON -DZT_CUDA=OFF -DZT_WERROR=ON > build-fuzz/configure.log 2>&1 ||
    { cat build-fuzz/configure.log; exit 1; }
fi
echo "=== build $target"
cmake --build build-fuzz -j "$(nproc 2>/dev/null || echo 2)" --target "$target"
work=build-fuzz/fuzz-long/$target
rm -rf "$work/corpus"
mkdir -p "$work/corpus" "$work/crashes"
cp tests/fuzz/corpus/"$name"/* "$work/corpus/"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
echo "=== $target for ${seconds}s over $work/corpus"
rc=0
"$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=25 -print_final_stats=1 \
  -artifact_prefix="$PWD/$work/crashes/" "$@" "$work/corpus" || rc=$?
found=$(find "$work/crashes" -type f | wc -l)
echo "=== $target: exit $rc; $found crashing input(s) in $work/crashes/"
exit $rc
