#!/usr/bin/env bash
# Installs the Debian packages zerotrain builds and tests with (only the
# missing ones; uses sudo when not root). See README.md, "Dependencies".
set -euo pipefail
packages=(build-essential cmake pkg-config openmpi-bin libopenmpi-dev libopenblas-dev
          libjansson-dev libxxhash-dev liburing-dev libsleef-dev python3 gnuplot-nox clang libclang-rt-14-dev libomp-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all Debian packages present"
  exit 0
fi
echo "deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
