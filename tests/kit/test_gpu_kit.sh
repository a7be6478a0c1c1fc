#!/usr/bin/env bash
# The GPU kit (launch/make_gpu_kit.sh) runs without the machine's Open MPI
# and libraries: it packs this CUDA build, unpacks the archive elsewhere and,
# inside a mount namespace where the system's Open MPI tree, its programs and
# every library the kit carries are hidden, trains 3 steps on 2 ranks
# (--device cpu: no GPU needed) through the kit's mpirun. Then env.sh must
# refuse, naming it, a kit with a library removed.
#   tests/kit/test_gpu_kit.sh BUILD_DIR WORK_DIR
# Exits 77 (skipped) where it cannot hide files: not root, or no unshare.
set -euo pipefail
build=$(cd "${1:?usage: test_gpu_kit.sh BUILD_DIR WORK_DIR}" && pwd)
work=${2:?usage: test_gpu_kit.sh BUILD_DIR WORK_DIR}
src=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$(id -u)" -ne 0 ] || ! unshare -m --propagation private true 2>/dev/null; then
  echo "SKIP: hiding the system's Open MPI needs root and unshare -m"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work/pack" "$work/device"
"$src/launch/make_gpu_kit.sh" --build "$build" --out "$work/pack"
tar -C "$work/device" -xzf "$work/pack/.gpu-kit.tar.gz"
cp -r "$src/launch" "$work/device/"

# What to hide: the Open MPI and PMIx trees, mpirun/orted, the kit's libraries.
hide=()
ompi_path() { ompi_info --path "$1" --parsable | sed -n "s/^path:$1://p"; }
for d in libdir pkgdatadir sysconfdir; do hide+=("dir:$(ompi_path $d)"); done
ldcache=$(ldconfig -p)
first_path() { awk -v n="$1" '$1 == n && !p {print $NF; p = 1}' <<<"$ldcache"; }
hide+=("dir:$(dirname "$(dirname "$(readlink -f "$(first_path libpmix.so.2)")")")")
hide+=("file:$(readlink -f "$(command -v mpirun)")" "file:$(readlink -f "$(command -v orted)")")
for so in "$work"/device/.gpu-kit/lib/*; do
  path=$(first_path "$(basename "$so")")
  [ -n "$path" ] && hide+=("file:$(readlink -f "$path")")
done
# libopenblas is chosen through alternatives, outside ldconfig's cache.
for p in /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 /usr/lib/x86_64-linux-gnu/libopenblas.so.0; do
  [ -e "$p" ] && hide+=("file:$(readlink -f "$p")")
done

cat > "$work/inside.sh" <<'INSIDE'
set -euo pipefail
work=$1; shift
# Files first: some lie inside the directories hidden after them.
for h in "$@"; do case "$h" in file:*) mount --bind /dev/null "${h#file:}" ;; esac; done
for h in "$@"; do case "$h" in dir:*) mount -t tmpfs none "${h#dir:}" ;; esac; done
cd "$work/device"
if mpirun --version >/dev/null 2>&1; then echo "FAIL: the system's mpirun still runs"; exit 1; fi
source .gpu-kit/env.sh
if ldd .gpu-kit/build/examples/zt-train | grep -E "libmpi|libopenblas|libjansson|libxxhash" | grep -v "$work/device/.gpu-kit/lib/"; then
  echo "FAIL: a library resolves outside the kit"; exit 1
fi
launch/zt-run -np 2 .gpu-kit/build/examples/zt-train --device cpu --steps 3 --quiet --log-dir "$work/run"
# A kit missing a library: env.sh names it and fails.
cp -r .gpu-kit "$work/broken"
rm "$work/broken/lib/libjansson.so.4"
if msg=$(env -u LD_LIBRARY_PATH bash -c "source '$work/broken/env.sh'" 2>&1); then echo "FAIL: env.sh accepted a kit without libjansson"; exit 1; fi
echo "$msg" | grep -q "libjansson.so.4" || { echo "FAIL: env.sh did not name the missing library: $msg"; exit 1; }
echo "broken kit refused: $msg"
INSIDE
unshare -m --propagation private bash "$work/inside.sh" "$work" "${hide[@]}"
python3 - "$work/run/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["world_size"] == 2 and len(s["losses"]) == 3, s
print("kit trained 2 ranks, losses", [round(x, 4) for x in s["losses"]])
PY
