#!/usr/bin/env bash
# Installs what Tessera builds against, from Debian's packages, when missing.
# Safe to run again: it installs nothing that is already there.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config
  ninja-build                 # the generator of new build folders (scripts/build.sh)
  libzmq3-dev cppzmq-dev      # transport
  librocksdb-dev              # disk tier of the parameter servers
  libgflags-dev libgoogle-glog-dev
  libgtest-dev
  libgloo-dev                 # CPU collectives
  libssl-dev                  # the trainers' sealed allreduce (OpenSSL's AES-GCM)
  libopenblas-dev             # dense layers
  nlohmann-json3-dev          # job config and control-plane JSON
  libcpp-httplib-dev          # the roles' Prometheus endpoint (--metrics_port)
  python3-dev pybind11-dev    # the Python package's extension (python/)
  clang libclang-rt-dev       # fuzz targets: libFuzzer (only recommended by clang, so named)
  iproute2 ethtool            # tests/cluster: test hosts in network namespaces (ip, tc; offloads off for the lossy hop)
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
