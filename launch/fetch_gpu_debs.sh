#!/usr/bin/env bash
# Downloads the Debian packages zt-train needs at run time (Open MPI, OpenBLAS,
# jansson, xxhash and their dependencies) into .gpu-debs/, for machines that
# have no package access, such as the lent GPU machine (which has CUDA and
# PyTorch but no Open MPI). Carry .gpu-debs/ there; bench/gpu_check.sh
# installs them with dpkg when the libraries are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu-debs
cd .gpu-debs
roots="openmpi-bin libopenblas0-pthread libjansson4 libxxhash0"
# Everything they pull in, minus what every Debian/Ubuntu system has.
pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
         --no-enhances $roots | grep '^\w' | sort -u |
       grep -v -E '^(libc6|libgcc-s1|libstdc\+\+6|debconf|perl-base|dpkg|base-files|libcrypt1|gcc-12-base|zlib1g)$')
apt-get download $pkgs
echo "fetch_gpu_debs: $(ls | wc -l) packages, $(du -sh . | cut -f1) in .gpu-debs/"
