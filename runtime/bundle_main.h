// The `main` of a standalone executable that `kiln compile --exe` links from a bundle and the
// runtime library (no LLVM, no kiln installation):
//   NAME train --data FILE [--steps N] [--seed S] [--load CKPT] [--save CKPT] [--log-every N]
//   NAME eval --weights CKPT --data FILE [--batches N] [--seed S]
// (an encoder-decoder: --task copy | reverse instead of --data)
//   NAME forward --weights CKPT --input FILE [--output FILE.safetensors]
//   NAME info
// Training draws byte-level windows of the text file as `kiln train` draws them from its corpus
// (runtime/tasks.h: the same seeded stream, so the same file and seed give the same batches; an
// encoder-decoder's copy and reverse batches are `kiln train`'s too), and
// starts from weights initialized from the seed as `kiln train` does, or from --load. Every
// option takes one value (--threads N too); errors go to stderr with exit status 1.
#pragma once

#include "runtime/bundle.h"

namespace kiln::runtime {

int bundleMain(const kiln_bundle &bundle, int argc, char **argv);

} // namespace kiln::runtime
