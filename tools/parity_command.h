// `kiln parity-dump`: everything an outside framework needs to check kiln's numerics on one
// model -- its resolved config, seeded weights, one batch, and kiln's loss, logits, gradients
// and (optionally) one optimizer step -- written as safetensors for tools/torch_parity.py.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "passes/optimizer.h"

namespace kiln::tools {

struct ParityArgs {
  std::string model;
  std::vector<std::string> sets;
  uint64_t seed = 0;
  std::string out;
  std::string load;      // weights from this checkpoint instead of the parity init
  std::string optimizer; // empty: no optimizer step
  passes::OptimizerConfig opt;
  // Where the loss and gradients are computed: the reference on the graph as built (the default,
  // f32), or the graph as kiln train compiles it (fused, lowered; bf16 products with precision
  // bf16) on this backend.
  std::string backend = "reference", precision = "f32";
};

// Declares the subcommand's options, bound to `args`.
CLI::App *addParityCommand(CLI::App &app, ParityArgs &args);
// Runs it; throws std::runtime_error with a user-facing message on bad input.
void runParity(ParityArgs &args);

} // namespace kiln::tools
