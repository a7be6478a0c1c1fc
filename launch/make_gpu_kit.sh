#!/usr/bin/env bash
# Prepares .gpu-kit.tar.gz: everything bench/gpu_check.sh needs on a GPU
# machine that has CUDA, a driver and python3 but none of zerotrain's other
# dependencies (no Open MPI, OpenBLAS, jansson or xxhash, no -dev packages,
# no package access), such as the lent H200 machine. Run it here, on the
# Debian machine that builds zerotrain; carry the archive there.
#
#   launch/make_gpu_kit.sh [--arch CUDA_ARCH] [--build DIR] [--out DIR]
#     --arch   the GPU's compute capability (default 90: H100/H200)
#     --build  pack the programs of this existing CUDA build (ZT_CUDA=ON)
#              instead of building them in build-gpu-kit/
#     --out    where .gpu-kit/ and .gpu-kit.tar.gz go (default: the
#              repository root, where gpu_check.sh looks for them)
#
# What goes in (.gpu-kit/, then packed):
#   build/   zt-train (and zt-plan) with its CUDA module (lib/libzt_cuda.so), test_cuda_ops, test_staged_pool, bench_kernels and bench_gemm, built
#            here by nvcc for sm_CUDA_ARCH (Release), laid out as in a build
#            directory;
#   lib/     every shared library those programs, Open MPI's mpirun and its
#            plugins load, as ldd resolves them here, except the C and C++
#            runtimes (the GPU machine's own; the kit needs glibc 2.36 or
#            newer, for libevent: Debian 12, Ubuntu 24.04 or later) and the CUDA libraries (cudart, cuBLAS(Lt),
#            NCCL: they must be the GPU machine's, matched to its driver);
#   root/    Open MPI's and PMIx's installation trees (plugins, help texts,
#            configuration) at their absolute paths, which Open MPI finds
#            through OPAL_DESTDIR and PMIx through PMIX_PREFIX;
#   env.sh   sets PATH, LD_LIBRARY_PATH and those variables, finds the GPU
#            machine's CUDA libraries (ldconfig, pip's nvidia-* packages,
#            /usr/local/cuda*), and fails naming any library still missing.
# The archive is about 20 MiB; the carry limit of the device tool is 64 MiB.
set -euo pipefail
usage() { sed -n '8,13p' "$0" >&2; exit 2; }
arch=90 bdir="" outdir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) arch=${2:?}; shift 2 ;;
    --build) bdir=$(cd "${2:?}" && pwd); shift 2 ;;
    --out) mkdir -p "${2:?}"; outdir=$(cd "$2" && pwd); shift 2 ;;
    *) echo "make_gpu_kit: unknown argument '$1'" >&2; usage ;;
  esac
done
cd "$(dirname "$0")/.."
outdir=${outdir:-$PWD}
[[ "$arch" =~ ^[0-9]+[a-z]?$ ]] || { echo "make_gpu_kit: --arch must look like 90 or 90a (got '$arch')" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "make_gpu_kit: Open MPI not installed here (launch/deps.sh)" >&2; exit 1; }

if [ -z "$bdir" ]; then
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { echo "make_gpu_kit: nvcc not found" >&2; exit 1; }
  bdir=$PWD/build-gpu-kit
  echo "make_gpu_kit: building for sm_$arch in $bdir"
  cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DZT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" > /dev/null
  cmake --build "$bdir" -j "$(nproc)" --target zt-train zt-plan zt_cuda test_cuda_ops test_staged_pool bench_kernels bench_gemm > /dev/null
else
  arch=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$bdir/CMakeCache.txt")
  [ -n "$arch" ] || { echo "make_gpu_kit: $bdir is not a CUDA build (configure it with -DZT_CUDA=ON)" >&2; exit 1; }
fi
for p in examples/zt-train examples/zt-plan lib/libzt_cuda.so tests/test_cuda_ops tests/test_staged_pool bench/bench_kernels bench/bench_gemm; do
  [ -f "$bdir/$p" ] || { echo "make_gpu_kit: $bdir/$p is missing (build it first)" >&2; exit 1; }
done

kit=$outdir/.gpu-kit
rm -rf "$kit" "$outdir/.gpu-kit.tar.gz"
mkdir -p "$kit/build/examples" "$kit/build/lib" "$kit/build/tests" "$kit/build/bench" "$kit/lib" "$kit/root"
cp "$bdir/examples/zt-train" "$bdir/examples/zt-plan" "$kit/build/examples/"
cp "$bdir/lib/libzt_cuda.so" "$kit/build/lib/" # the CUDA module zt-train opens (../lib from examples/)
cp "$bdir/tests/test_cuda_ops" "$bdir/tests/test_staged_pool" "$kit/build/tests/"
cp "$bdir/bench/bench_kernels" "$bdir/bench/bench_gemm" "$kit/build/bench/"

# Open MPI: mpirun is a chain of links to orterun; orted too.
# (awk reads all of ldconfig's output: an early exit would SIGPIPE it.)
ompi_lib=$(dirname "$(readlink -f "$(ldconfig -p | awk '$1 == "libmpi.so.40" && !p {print $NF; p = 1}')")")
ompi_path() { ompi_info --path "$1" --parsable 2>/dev/null | sed -n "s/^path:$1://p"; }
ompi_tree=$(ompi_path libdir) ompi_pkglib=$(ompi_path pkglibdir)
ompi_pkgdata=$(ompi_path pkgdatadir) ompi_sysconf=$(ompi_path sysconfdir)
pmix_prefix=$(dirname "$(dirname "$(readlink -f "$ompi_lib/libpmix.so.2")")")
for d in "$ompi_tree" "$ompi_pkglib" "$ompi_pkgdata" "$ompi_sysconf" "$pmix_prefix"; do
  [ -d "$d" ] || { echo "make_gpu_kit: Open MPI directory '$d' not found" >&2; exit 1; }
  mkdir -p "$kit/root$d"
  cp -a "$d/." "$kit/root$d/"
done
mkdir -p "$kit/root/usr/bin"
cp "$(readlink -f "$(command -v mpirun)")" "$kit/root/usr/bin/mpirun"
cp "$(readlink -f "$(command -v orted)")" "$kit/root/usr/bin/orted"
# Development leftovers and other MPI APIs' plugins are not needed.
rm -rf "$kit/root$ompi_tree/pkgconfig" "$kit/root$pmix_prefix/include"
find "$kit/root" \( -name '*.a' -o -name '*.la' -o -name '*java*' \) -delete

# Shared libraries: the closure ldd reports for the programs and plugins.
skip='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libutil|libresolv|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so'
mapfile -t objects < <(find "$kit/build" "$kit/root" -type f \( -perm -u+x -o -name '*.so*' \))
for o in "${objects[@]}"; do
  ldd "$o" 2>/dev/null | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r soname path; do
  [[ "$soname" =~ $skip ]] && continue
  [ -e "$kit/lib/$soname" ] || cp -L "$path" "$kit/lib/$soname"
done

cat > "$kit/env.sh" <<EOF
# Source this (bash) on the GPU machine (safe under set -euo pipefail): makes
# the kit's Open MPI and libraries visible and finds the machine's CUDA
# libraries; returns 1, naming what is missing, if a program cannot load.
# Generated by launch/make_gpu_kit.sh on $(date -u +%F) (.gpu-kit/MANIFEST
# says from what).
zt_kit=\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)
# Settings an image may carry for its own MPI would override the relocation.
unset OPAL_PREFIX OPAL_EXEC_PREFIX OPAL_BINDIR OPAL_LIBDIR OPAL_PKGLIBDIR OPAL_DATADIR OPAL_PKGDATADIR \\
      OPAL_SYSCONFDIR PMIX_INSTALL_PREFIX PMIX_EXEC_PREFIX PMIX_LIBDIR PMIX_DATADIR PMIX_SYSCONFDIR
for zt_v in \${!OMPI_MCA_@} \${!PMIX_MCA_@}; do unset "\$zt_v"; done
# A machine without ssh or rsh (the lent GPU machine has neither): Open MPI
# refuses to start, even a singleton or one node's ranks, which it forks
# without the agent, unless the agent names a program that exists.
if ! command -v ssh >/dev/null && ! command -v rsh >/dev/null; then export OMPI_MCA_plm_rsh_agent=false; fi
export OPAL_DESTDIR=\$zt_kit/root
export PMIX_PREFIX=\$zt_kit/root$pmix_prefix
export PMIX_PKGLIBDIR=\$PMIX_PREFIX/lib/pmix PMIX_PKGDATADIR=\$PMIX_PREFIX/share/pmix
export PATH=\$zt_kit/root/usr/bin:\$PATH
zt_kit_libs=\$zt_kit/lib
# CUDA runtime, cuBLAS, cuBLASLt and NCCL: the machine's own, from ldconfig's
# cache, or else from pip's nvidia-* packages or a toolkit (one find).
zt_kit_cache=\$(ldconfig -p 2>/dev/null || true)
zt_kit_want=()
for zt_so in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  grep -q "\$zt_so " <<<"\$zt_kit_cache" || zt_kit_want+=(-o -name "\$zt_so")
done
if [ \${#zt_kit_want[@]} -gt 0 ]; then
  zt_kit_roots=\$(python3 -c 'import site; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null || true)
  for zt_d in \$( { find \$zt_kit_roots /usr/local/cuda*/ /opt \\( -false "\${zt_kit_want[@]}" \\) -printf '%h\n' 2>/dev/null
                  find /usr/local/lib -maxdepth 1 \\( -false "\${zt_kit_want[@]}" \\) -printf '%h\n' 2>/dev/null; } |
                sort -u || true); do
    zt_kit_libs=\$zt_kit_libs:\$zt_d
  done
fi
export LD_LIBRARY_PATH=\$zt_kit_libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
# "not found" (a library, or a symbol version such as GLIBC_2.36: the kit
# needs glibc 2.36), or a file the loader rejects: the whole line.
zt_kit_missing=\$(ldd "\$zt_kit/build/examples/zt-train" "\$zt_kit/root/usr/bin/mpirun" 2>&1 |
  awk '/not found|error while loading/ {sub(/^[ \t]+/, ""); print}' | sort -u | paste -sd ';' || true)
if [ -n "\$zt_kit_missing" ]; then
  echo "gpu kit: cannot load on this machine: \$zt_kit_missing" >&2
  return 1 2>/dev/null || exit 1
fi
EOF
commit=$(git rev-parse HEAD)
git diff --quiet HEAD -- || commit="$commit (with uncommitted changes)"
echo "built $(date -u +%FT%TZ) from $commit for sm_$arch on $(. /etc/os-release; echo "$PRETTY_NAME")" > "$kit/MANIFEST"
(cd "$kit" && find . -type f | sort) >> "$kit/MANIFEST"
tar -C "$outdir" -czf "$outdir/.gpu-kit.tar.gz" .gpu-kit
echo "make_gpu_kit: $(du -sh "$kit" | cut -f1) in $kit, $(du -sh "$outdir/.gpu-kit.tar.gz" | cut -f1) packed in $outdir/.gpu-kit.tar.gz"
