// Checkpoints of any Executable: its parameters and optimizer state saved to and loaded from
// safetensors files under their PyTorch-style names, each tensor checked against the program's
// symbol table (dtype, shape) and its domain (finite values; optimizer moments >= 0; the step
// counter a whole number), so that a damaged or foreign file is refused before anything changes.
#pragma once

#include <string>
#include <vector>

#include "runtime/executable.h"
#include "runtime/model_description.h"
#include "runtime/safetensors.h"
#include "support/status.h"

namespace kiln::runtime {

// One tensor in the file's format: f32, f64, bf16 (its 16 bits), i32, i64, bool (one byte each).
SafetensorsTensor toSafetensors(std::string name, const HostTensor &t);
// The file's tensor as a host tensor of `dtype` and `shape`; Error if the file's differ.
Expected<HostTensor> fromSafetensors(const SafetensorsTensor &t, DType dtype,
                                     const std::vector<int64_t> &shape);
// The largest whole number that dtype t holds exactly along with all below it (a step counter's
// domain; an f32 optimizer counts exactly to 2^24, a bf16 one to 2^8).
double exactIntegerLimit(DType t);
// Whether `t` holds values of symbol `s`'s domain; the Error names the element.
Status checkDomain(const Symbol &s, const HostTensor &t);

// Saves every parameter and state tensor of `exe` but KV caches (Symbol::inCheckpoint) to
// `path` (runtime::writeSafetensors: atomic). Under a communicator of several ranks, every rank
// calls it and rank 0 writes (a sharded optimizer's state is gathered from them all:
// runtime/sharded_state.h). `batches` >= 0: the batches the training run has
// drawn, kept as the metadata "batches" (a step whose update was skipped drew one too; the
// optimizer's step counter counts only updates), where a resumed run continues. `description`,
// if given, goes into the metadata (runtime/model_description.h). Error (nothing written): a
// tensor outside its domain (checkDomain: weights a training step made NaN), which no load takes.
Status saveCheckpoint(const Executable &exe, const std::string &path, int64_t batches = -1,
                      const ModelDescription *description = nullptr);
// Whether this process writes `exe`'s checkpoints: it alone, or rank 0 of its communicator's.
bool writesCheckpoints(const Executable &exe);
// What saveCheckpoint writes, in memory (kiln compile stages it with the bundle's other parts); on
// a rank other than 0, no tensors (its part of sharded state goes to rank 0's file).
Expected<SafetensorsFile> checkpointFile(const Executable &exe, int64_t batches = -1,
                                         const ModelDescription *description = nullptr);

// The batches drawn by the run that saved `path`: its "batches" metadata; without it the updates
// its optimizer made (the step counter); 0 if it keeps no optimizer state (whatever its metadata
// says: a run from such weights starts its optimizer, schedule and batches afresh). Errors: a file
// that does not read, a count that is not a whole number in [0, 1e15).
Expected<int64_t> batchesIn(const std::string &path);

// Loads the parameters and state of `exe` from `path`. Every parameter must be in the file, and
// all of the state or none of it (a weights-only file starts the optimizer fresh; a KV cache is
// never in a checkpoint and is left as it is). A tensor the
// program does not have is an error: the file belongs to another model configuration (but a
// program that keeps no optimizer state, for inference, passes over a training checkpoint's:
// kOptimizerStatePrefix). Nothing is written into `exe` unless the whole file is good. A sharded
// optimizer's state takes this rank's part of the parameters' whole state (which needs `exe`'s
// communicator set). Returns how many tensors were loaded.
Expected<int> loadCheckpoint(Executable &exe, const std::string &path);

} // namespace kiln::runtime
