// The `main` of a standalone executable that `kiln compile --exe` links from a bundle and the
// runtime library (no LLVM, no kiln installation): NAME train | eval | forward | generate |
// translate | info, with options as runtime/bundle_args.h lists them (`NAME --help`, `NAME
// COMMAND --help`). Training runs kiln train's loop (runtime/training_session.h: the same batches
// from the same seed, the same loss lines, progress bar, Ctrl-C save, --eval-every and
// --save-every) on the bundle's training step, from weights initialized from the seed as kiln
// train does, or from --load. Generation and translation run as kiln generate and kiln translate
// do (runtime/generation.h), with the KV cache of the prefill and decode programs that a forward
// bundle holds. Errors go to stderr with exit status 1.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/bundle.h"
#include "runtime/communicator.h"

namespace kiln::runtime {

// The programs of a standalone executable: its main one (a training step or a forward pass) and,
// in a forward bundle, the two that generate: a decoder's prefill and decode programs
// (models::buildGptCached), or an encoder-decoder's encode and decode programs
// (models::buildTransformerCached), at the rows they were compiled for (kiln compile
// --gen-batch: prompts at once, or beams).
struct BundleSet {
  const kiln_bundle *main = nullptr;
  const kiln_bundle *prefill = nullptr; // an encoder-decoder's: its encoder
  const kiln_bundle *decode = nullptr;
  // In a training bundle, its validation program (train --eval-every, eval): the model with its
  // loss, without dropout, as kiln train validates; its parameters are the step's.
  const kiln_bundle *eval = nullptr;
  // The id the model masks as padding (its pad_id; -1: unknown, a bundle of an IR file): an
  // encoder-decoder's tasks and translation pad with runtime::kPad (0), which it must be, and an
  // mlm text must not hold it; and the id that pads task pairs' targets (the loss's ignore
  // index).
  int64_t padId = -1, ignoreId = -100;
  // A training bundle: its optimizer and learning-rate schedule as `info` prints them, and the
  // step at which the schedule ends (warmup_cosine's total, baked into the program: past it every
  // step trains at min_lr; 0 for schedules without an end). train refuses to run past it.
  const char *optimizer = nullptr;
  int64_t scheduleSteps = 0;
  // A training bundle's weights as kiln compile made them: fresh at `seed` (--seed: also the
  // default of train's and eval's --seed, so that train is kiln train --seed N), or, `resumes`,
  // a checkpoint's (--load), in the bundle's weights file named there, which train then needs as
  // its --load (it would otherwise train fresh weights, silently).
  uint64_t seed = 0;
  const char *resumes = nullptr;
  // The CPU its generated code was compiled for (LLVM's name) and the features that code may use
  // (runtime/cpu_features.h names, comma-separated): bundleMain checks them before it runs any.
  const char *cpu = nullptr, *cpuFeatures = nullptr;
  // A training step of one of N data-parallel ranks (kiln compile --train --ranks N: its bundle's
  // `ranks`): train runs under mpirun -np N, in MPI's world as `openWorld` opens it (runtime/mpi/,
  // which such an executable links; null in every other).
  Expected<std::unique_ptr<Communicator>> (*openWorld)() = nullptr;
  // Compiled with --precision bf16: where its products run on f32 FMAs, a run says so once on
  // stderr, as kiln does (runtime/environment.h: bf16FallbackNote).
  bool bf16Products = false;
};

int bundleMain(const BundleSet &bundles, int argc, char **argv);

} // namespace kiln::runtime
