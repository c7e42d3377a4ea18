// The sharded optimizer's state (ZeRO stage 1: "opt.KIND.*", this rank's part of KIND over the
// parameters, laid out as kShardedParameters says) in checkpoints. A checkpoint holds, as one
// process saves it, each parameter's whole "opt.KIND.NAME": saving gathers the parts to rank 0 and
// splits them by parameter; loading takes this rank's part of the parameters' tensors. So a
// checkpoint does not depend on the ranks that saved it, nor on whether they sharded.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/executable.h"
#include "runtime/safetensors.h"
#include "support/status.h"

namespace kiln::runtime {

// Whether `s` is a sharded state "opt.KIND.*".
bool isShardedState(const Symbol &s);

// The parameters sharded state is a part of: the float ones, in argument order.
std::vector<const Symbol *> shardedParameters(const Program &program);

// The tensor of a checkpoint that says whether it holds state `s`: s.name, or for sharded state
// the first parameter's whole "opt.KIND.NAME".
std::string checkpointNameOf(const Program &program, const Symbol &s);

// The sharded state whose whole the checkpoint tensor `name` is a part of ("opt.KIND.NAME", NAME a
// float parameter, where the program holds "opt.KIND.*"), or nullptr.
const Symbol *shardedStateOf(const Program &program, std::string_view name);

// Each parameter's "opt.KIND.NAME" of sharded state `s`, gathered from the ranks of `exe`'s
// communicator: every rank must call it (a collective); rank 0 gets the tensors, the others none.
// A program without its ranks (kiln compile's, which runs no step) holds the state it started
// with, zeros on every rank, and gets zeros. Errors: MPI's, a program compiled for other ranks.
Expected<std::vector<SafetensorsTensor>> gatherShardedState(const Executable &exe, const Symbol &s);

// This rank's part of sharded state `s` from `file`'s "opt.KIND.NAME" tensors. Errors (naming
// `path`): a parameter's tensor missing, of another shape or outside the state's domain (each
// whole tensor is checked, so every rank refuses the same file alike), a program compiled for
// other ranks.
Expected<HostTensor> shardOfState(const Executable &exe, const Symbol &s,
                                  const SafetensorsFile &file, const std::string &path);

} // namespace kiln::runtime
