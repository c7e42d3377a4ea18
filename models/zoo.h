// The model zoo: every model the CLI and the tests can build, by name, in one explicit table
// (no static registration): the built-in models, then those a program built on kiln adds with
// addModels (tools/cli.h's cliMain does, from the table its caller passes). A model is built from
// `key=value` settings over its config struct's defaults; an unknown key or a bad value is an
// Error naming the key and what was expected.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "support/status.h"

namespace kiln::models {

struct Setting {
  std::string key, value;
};

// Parses "key=value" (as given to --set); Error if there is no '=' or the key is empty.
Expected<Setting> parseSetting(std::string_view text);

struct ModelEntry {
  std::string_view name;    // "gpt", "bert", "transformer"
  std::string_view summary; // one line
  // Builds the forward graph. Errors: unknown key, unparsable value, invalid combination
  // (e.g. d_model not divisible by n_heads), each naming the key.
  Expected<ir::Graph> (*build)(std::span<const Setting> settings);
  // One line per config key: "key = default  (allowed values or meaning)".
  std::vector<std::string> (*describe)();
  // What `train` teaches it without --task (runtime/tasks.h: lm, mlm, copy, ...); the graph
  // built with loss=true takes that task's inputs.
  std::string_view task = "lm";
  // The number each key that takes `auto` means in the model these settings build, whatever they
  // give the key itself ({"norm_eps", "1e-06"} for an RMSNorm): a compiled bundle records them,
  // as it checks a checkpoint's settings without the zoo (runtime::checkSameModel), where an
  // imported 1e-06 and auto are the same eps. nullptr: the model has no such key.
  Expected<std::vector<Setting>> (*autoValues)(std::span<const Setting> settings) = nullptr;
};

// Config keys that set up a run rather than the weights. A checkpoint's description
// (runtime/model_description.h) keeps the others as they were trained, fixed; of these it keeps
// all but loss (isDefaultRunSetting), as defaults, so that `train --load` continues the run it
// resumes (the rows a step draws depend on the batch, its dropout masks on dropout and seed, its
// loss on label_smoothing and ignore_index), and a command may set any of them anew. The
// training settings (kTrainingSettings) only a training run adopts: generate, run and the other
// inference commands run without dropout, as PyTorch's eval().
inline constexpr std::string_view kRunSettings[] = {
    "batch",   "seq_len", "src_len",         "tgt_len",     "loss",
    "dropout", "seed",    "label_smoothing", "ignore_index"};
inline constexpr std::string_view kLengthSettings[] = {"seq_len", "src_len", "tgt_len"};
inline constexpr std::string_view kTrainingSettings[] = {"dropout", "seed", "label_smoothing",
                                                         "ignore_index"};
bool isRunSetting(std::string_view key);
// The run settings but loss.
bool isDefaultRunSetting(std::string_view key);
bool isLengthSetting(std::string_view key);
bool isTrainingSetting(std::string_view key);
// Whether weights loaded from a checkpoint leave `key` nothing to decide in a model of these
// settings (`config`: every key with its value, tools::resolvedConfig's): init, which only draws
// fresh weights, and a kind of positions' own key where the model has another kind (rope_theta
// but with rope, relative_k but with relative positions). A compiled
// bundle does not hold a checkpoint to such a key (runtime::checkSameModel).
bool mootWithWeights(std::string_view key,
                     std::span<const std::pair<std::string, std::string>> config);

std::span<const ModelEntry> allModels();
// Appends `models` to the table (for the rest of the process). Error, adding none, if an entry
// has no name or no builder, or its name is not [a-z0-9_] or is taken.
Status addModels(std::span<const ModelEntry> models);
const ModelEntry *findModel(std::string_view name); // nullptr if unknown
// findModel + build; Error lists the known model names when `name` is unknown.
Expected<ir::Graph> buildModel(std::string_view name, std::span<const Setting> settings);

} // namespace kiln::models
