// `kiln import DIR -o CKPT`: a Hugging Face model directory (GPT-2 or LLaMA's family: config.json,
// model.safetensors, tokenizer.json) as one self-describing kiln checkpoint, which generate,
// train --load, compile --load and the rest take with no --set and no --tokenizer.
// `kiln export CKPT -o DIR [--architecture CLASS]`: a kiln gpt checkpoint back as a Hugging Face
// directory.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace kiln::tools {

struct InteropArgs {
  std::string from, out;
  std::string architecture; // export's --architecture ("": the one imported from, or that fits)
  CLI::App *importCmd = nullptr, *exportCmd = nullptr;
};

void addInteropCommands(CLI::App &app, InteropArgs &args);
// Runs whichever of the two was given; false if neither.
bool runInterop(InteropArgs &args);

} // namespace kiln::tools
