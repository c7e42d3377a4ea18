#!/usr/bin/env bash
# Installs the Debian 12 packages kiln needs to build (and, with --test, to run its tests).
# Idempotent: apt-get only runs when something is missing. Run as root.
set -euo pipefail
pkgs=(cmake make g++ python3 llvm-19-dev llvm-19-tools libhwy-dev libfmt-dev libgtest-dev
      libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev libcairo2-dev)
# The test suite also checks kiln against PyTorch (tools/torch_parity.py).
if [ "${1:-}" = "--test" ]; then
  pkgs+=(python3-torch python3-numpy)
fi
# The benchmarks compare our GEMM with OpenBLAS (bench/gemm_bench.cc) and kiln with PyTorch.
if [ "${1:-}" = "--bench" ]; then
  pkgs+=(libopenblas-dev python3-torch python3-numpy)
fi
# The fuzz targets and the sanitizer build (tools/fuzz.sh, .ci/run) need clang and its runtimes.
if [ "${1:-}" = "--fuzz" ]; then
  pkgs+=(clang-19 libclang-rt-19-dev)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
