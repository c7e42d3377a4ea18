// What a checkpoint says about itself, as Hugging Face directories and GGUF files do: the model it
// belongs to (a name of kiln's model table), the settings that build it, and the tokenizer its
// ids mean. Kept in the safetensors metadata, so one file is the whole artifact: `kiln generate
// --load c.safetensors` needs no --set and no --tokenizer, and other tools still read the file.
//
// Metadata keys: "kiln.model" (the name), "kiln.settings" (a JSON object of key -> value text,
// e.g. {"d_model": "768"}), "kiln.tokenizer" (the tokenizer.json text; absent: byte tokens),
// "kiln.task" (the task a training run trained it on: runtime/tasks.h; absent: not said),
// "kiln.end_tokens" (a JSON array of the ids a generated text ends at: a Hugging Face config's
// eos_token_id; absent: the tokenizer's end-of-sequence token, Tokenizer::eosId()),
// "kiln.hf_architecture" (the Hugging Face class it was imported from, which export writes again).
// The runtime sees no model table: the settings are text here, and the CLI checks them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/bundle.h"
#include "runtime/tokenizer.h"
#include "support/status.h"

namespace kiln::runtime {

struct ModelDescription {
  std::string model;
  std::vector<std::pair<std::string, std::string>> settings; // in the order they apply
  std::string tokenizerJson;                                 // "": byte tokens
  // The ids a generated text ends at, as the model's config named them (Llama 3 Instruct's
  // <|end_of_text|>, <|eom_id|> and <|eot_id|>); empty: the tokenizer's EOS.
  std::vector<int32_t> endTokens;
  std::string task; // the task it was trained on ("copy", ...; "": not said), which resuming it
                    // continues where no other is asked for
  // The Hugging Face class its weights came from (config.json's architectures[0]:
  // "Phi3ForCausalLM"; "": none), kept through fine-tunes, so that export writes the layout it was
  // imported from where several hold the model (Phi-3's fused projections, LLaMA's apart).
  std::string hfArchitecture;

  bool operator==(const ModelDescription &) const = default;
};

// Adds the description's keys to a safetensors metadata map.
void describeIn(const ModelDescription &d, std::map<std::string, std::string> &metadata);
// The description a metadata map holds; nullopt when it holds none (a checkpoint of an older
// kiln, or of another tool). Errors (naming `where`, the file): a malformed "kiln.settings".
Expected<std::optional<ModelDescription>>
describedBy(const std::map<std::string, std::string> &metadata, const std::string &where);
// The same, read from the header of the checkpoint at `path` (no tensor data is read).
Expected<std::optional<ModelDescription>> readDescription(const std::string &path);

// The task a run resuming the checkpoint at `path` continues where no --task names one
// (continuedTask, runtime/tasks.h, of its description's task; "" for a checkpoint that says none),
// as kiln train and the executables' train and eval both read it.
Expected<std::string> checkpointTask(const std::string &path, bool withData);

// Error where the checkpoint `where`, described by `checkpoint`, is not of the model a compiled
// bundle runs (`bundle`: compiled from a model of kiln's table with these settings), which cannot
// adopt a checkpoint's settings as kiln's commands do: another model, or another value of a
// setting that fixes what the weights mean (an activation or a norm's kind leaves their shapes as
// they are). `defaults`: each such setting's default, the value of one a description leaves out
// or sets to auto (the run settings -- lengths, batch, dropout -- are not among them; a default of
// auto is written as the number it means in the bundle's model). `runs` names the bundle in the
// message ("this executable").
Status checkSameModel(const ModelDescription &checkpoint, const ModelDescription &bundle,
                      const std::vector<std::pair<std::string, std::string>> &defaults,
                      const std::string &where, std::string_view runs);

// The value a description gives `key` (its last setting of it), or nullopt: the default.
std::optional<std::string> settingIn(const ModelDescription &d, const std::string &key);
// The settings a checkpoint was trained with that a bundle was compiled with other values of,
// "key=value (this executable: value)" each (a value spelled out on one side and left at the
// default on the other counts as another). After checkSameModel, only the run's settings (batch,
// lengths, dropout, ...) can differ, which kiln train --load adopts and a compiled step fixes, and
// those the weights make moot (init, ...: not among the bundle's defaults; an older kiln's
// checkpoint says them).
std::vector<std::string> otherSettings(const ModelDescription &checkpoint,
                                       const ModelDescription &bundle);
// The checkpoint's description as a bundle's run that resumes it says it (otherSettings' keys at
// the bundle's values, in the checkpoint's order; dropped where the bundle has the default), so
// that a checkpoint of that run makes kiln train --load continue what it ran.
ModelDescription continuedBy(const ModelDescription &checkpoint, const ModelDescription &bundle);

// What the bundle `b` says of the model it was compiled from (runtime/bundle.h: model,
// settings); nullopt if it says nothing (compiled from an IR file).
Expected<std::optional<ModelDescription>> bundleDescription(const kiln_bundle &b);
// checkSameModel for the checkpoint at `path` and the bundle `b`, when both say what they are;
// also describedBy's error (a malformed "kiln.settings"). A checkpoint that says nothing, or
// cannot be read, is left to the load (which names what is wrong with it). Compiled executables
// and the C API (kiln_model_open) both check with it.
Status checkCheckpointFits(const kiln_bundle &b, const std::string &path, std::string_view runs);

// The tokenizer a run uses: the tokenizer.json at `path` if one is given, else the one the
// checkpoint `where` carries (`checkpoint`, its description; null: it has none) if there is one,
// else byte tokens; ending texts at the description's endTokens (Tokenizer::setEndIds), which are
// the model's whichever tokenizer is used. Error: a file given whose tokenizer is not the
// checkpoint's, or given for a checkpoint that a training run on text trained on bytes (its
// description says a task and no tokenizer): its ids would mean other text. As kiln's commands
// and standalone executables both say it.
Expected<Tokenizer> chooseTokenizer(const std::string &path, const ModelDescription *checkpoint,
                                    const std::string &where);

} // namespace kiln::runtime
