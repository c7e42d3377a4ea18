#!/usr/bin/env bash
# The test command's second half (README, .ci/run): the whole test suite built with clang-19 and
# AddressSanitizer + UndefinedBehaviorSanitizer in build-san/ (any finding aborts the test that
# hit it: -fno-sanitize-recover), the Highway kernels included; then each fuzz target for
# KILN_FUZZ_SECONDS (default 10) from its seeds and regressions (tools/fuzz.sh), in the same build;
# and, when the GCC build/ of the first half is there, tools/compare_compilers.sh between its kiln
# and this clang one (every zoo model and variant must dump the same IR from both compilers).
# -O1 with line tables only: the build takes half the time of -O2 -g and reports keep file:line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh --fuzz
cmake -S . -B build-san -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-19 \
  -DCMAKE_CXX_COMPILER=clang++-19 "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
  -DKILN_FUZZ=ON -DKILN_SANITIZE=address,undefined -DKILN_BENCHMARKS=OFF >/dev/null
cmake --build build-san -j2
echo "sanitize: build took ${SECONDS} s"
# Leaves out the four runs that train to a loss threshold (minutes each under the sanitizers,
# repeating the steps that the backend-equivalence, golden and determinism tests run here too),
# the llvm backend's model matrix (100 s here; its kernel steps are the highway instance's, which
# runs, and its generated code is not instrumented: the region tests, which run, compare that
# code's bits with the interpreter's), the 20-step loss curves on both backends (90 s each here:
# the same kernel calls as the one-step model matrix, which runs, twenty times over) and the
# PyTorch parity run (90 s here: its kiln side is `kiln parity-dump`, the forward and gradients
# that the model matrix checks here too; PyTorch's side is not ours to sanitize) and the MPI job
# (data_parallel: its ranks are sanitized kiln processes inside Open MPI, whose own allocations
# left at exit LeakSanitizer reports as leaks; the all_reduce kernel and the pass are the
# DataParallel unit tests', which run here). hf_parity runs its 300-token variants, every
# architecture's import, forward, generation and export, but not those with real vocabularies of
# 32k to 200k tokens (KILN_HF_PARITY_SMALL: minutes here on the same code at larger sizes; the
# release run has them, and the tokenizers themselves run here in tokenizer_reference).
KILN_HF_PARITY_SMALL=1 bash tools/ctest.sh build-san \
  -E '^Train/TrainTask\.|^Backends/FastBackend\.LossAndEveryGradient[A-Za-z]*/llvm|^Backends/FastBackend\.TwentyTrainingSteps|^torch_parity$|^data_parallel$'
for target in ir_text opt safetensors config tokenizer bundle_args; do
  KILN_FUZZ_BUILD=build-san bash tools/fuzz.sh "$target" "${KILN_FUZZ_SECONDS:-10}"
done
echo "sanitize: build, tests and fuzzing took ${SECONDS} s"
if [ -x build/kiln ]; then
  bash tools/compare_compilers.sh build/kiln build-san/kiln
fi
