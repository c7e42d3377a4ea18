// Hugging Face directories in and out (see huggingface.h): the files, the dtypes, and the walk
// over an architecture's tensor rules (hf_mapping.h) in either direction.
#include "interop/huggingface.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "interop/hf_mapping.h"
#include "runtime/input_file.h"
#include "runtime/json_text.h"
#include "runtime/tokenizer.h"
#include "support/bf16.h"

namespace kiln::interop {

using runtime::Json;
using runtime::SafetensorsDtype;
using runtime::SafetensorsFile;
using runtime::SafetensorsTensor;

// ---- config.json values ----

Error ConfigReader::error(std::string_view key, std::string_view expected) const {
  std::string got = config.contains(key) ? config.at(std::string(key)).dump() : "nothing";
  if (got.size() > 80)
    got = got.substr(0, 77) + "...";
  return makeError("config.json: {}{}: expected {}, got {}", where, key, expected, got);
}

bool ConfigReader::present(std::string_view key) const {
  auto it = config.find(key);
  return it != config.end() && !it->is_null();
}

Expected<int64_t> ConfigReader::integer(std::string_view key) const {
  if (!present(key))
    return error(key, "a positive integer");
  return integer(key, 0);
}

Expected<int64_t> ConfigReader::integer(std::string_view key, int64_t fallback) const {
  if (!present(key))
    return fallback;
  const Json &v = config.at(std::string(key));
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > models::kMaxDimension)
    return error(key, fmt::format("an integer in [1, {}]", models::kMaxDimension));
  return v.get<int64_t>();
}

Expected<double> ConfigReader::number(std::string_view key, double fallback) const {
  if (!present(key))
    return fallback;
  const Json &v = config.at(std::string(key));
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
    return error(key, "a positive number");
  return v.get<double>();
}

Expected<std::vector<double>> ConfigReader::numbers(std::string_view key,
                                                    std::string_view expected) const {
  const Json *list = present(key) ? &config.at(std::string(key)) : nullptr;
  std::vector<double> out;
  for (size_t i = 0; list && list->is_array() && i < list->size(); ++i)
    if (const Json &x = list->at(i);
        x.is_number() && std::isfinite(x.get<double>()) && x.get<double>() > 0)
      out.push_back(x.get<double>());
  if (!list || !list->is_array() || out.empty() || out.size() != list->size())
    return error(key, expected);
  return out;
}

Expected<bool> ConfigReader::boolean(std::string_view key, bool fallback) const {
  if (!present(key))
    return fallback;
  const Json &v = config.at(std::string(key));
  if (!v.is_boolean())
    return error(key, "true or false");
  return v.get<bool>();
}

Expected<std::string> ConfigReader::text(std::string_view key, std::string fallback) const {
  if (!present(key))
    return fallback;
  const Json &v = config.at(std::string(key));
  if (!v.is_string())
    return error(key, "a string");
  return v.get<std::string>();
}

models::Setting setting(std::string key, int64_t value) {
  return {std::move(key), std::to_string(value)};
}
models::Setting setting(std::string key, double value) {
  return {std::move(key), fmt::format("{}", value)}; // shortest text that reads back exactly
}
models::Setting setting(std::string key, std::string value) {
  return {std::move(key), std::move(value)};
}

std::vector<int64_t> TensorRule::hfShape() const {
  std::vector<int64_t> s = kilnShape;
  s[0] = rows == 0 ? kilnShape[0] : rows;
  if (transposed)
    std::reverse(s.begin(), s.end());
  return s;
}

int64_t TensorRule::hfIndex(int64_t o, int64_t i) const {
  int64_t rowLength = 1;
  for (size_t a = 1; a < kilnShape.size(); ++a)
    rowLength *= kilnShape[a];
  const int64_t row = offset + o;
  return transposed ? i * (rows == 0 ? kilnShape[0] : rows) + row // [in, rows]
                    : row * rowLength + i;                        // [rows, rest...]
}

namespace {

// (In the order export prefers them: Phi-3's layout holds any model LLaMA's does, but for a
// scaled RoPE; it is written where asked or imported from.)
const Architecture *const kArchitectures[] = {&gpt2Architecture(), &llamaArchitecture(),
                                              &qwen2Architecture(), &phi3Architecture(),
                                              &gemmaArchitecture()};

// The architecture config.json names: "architectures"[0], else "model_type".
Expected<const Architecture *> architectureOf(const Json &config) {
  std::vector<std::string> known;
  for (const Architecture *a : kArchitectures)
    known.emplace_back(a->name);
  known.emplace_back("MistralForCausalLM");
  auto archs = config.find("architectures");
  if (archs != config.end() && !archs->is_null()) {
    if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string())
      return makeError("config.json: architectures: expected a list of class names, got {}",
                       archs->dump());
    const std::string name = (*archs)[0].get<std::string>();
    for (const Architecture *a : kArchitectures)
      if (name == a->name)
        return a;
    if (name == "MistralForCausalLM")
      return &llamaArchitecture();
    return makeError("config.json: architectures: \"{}\" is not one kiln imports ({})", name,
                     fmt::join(known, ", "));
  }
  auto type = config.find("model_type");
  if (type != config.end() && type->is_string()) {
    for (const Architecture *a : kArchitectures)
      if (*type == a->modelType)
        return a;
    if (*type == "mistral")
      return &llamaArchitecture();
    return makeError("config.json: model_type: \"{}\" is not one kiln imports (gpt2, llama, "
                     "mistral, qwen2, phi3, gemma)",
                     type->get<std::string>());
  }
  return makeError("config.json: neither \"architectures\" nor \"model_type\" says what model "
                   "this is (kiln imports {})",
                   fmt::join(known, ", "));
}

Expected<Json> readJsonFile(const std::string &path) {
  Expected<std::string> text = runtime::readInputText(path);
  if (!text)
    return text.error();
  Expected<runtime::JsonText> json = runtime::readJson(*text, {});
  if (!json)
    return makeError("{}: {}", path, json.error().message);
  if (!json->value.is_object())
    return makeError("{}: expected a JSON object", path);
  return std::move(json->value);
}

// model.safetensors, or the shards model.safetensors.index.json lists, as one file.
Expected<SafetensorsFile> readWeights(const std::filesystem::path &dir) {
  const std::filesystem::path single = dir / "model.safetensors";
  const std::filesystem::path index = dir / "model.safetensors.index.json";
  std::error_code ec;
  if (std::filesystem::exists(single, ec))
    return runtime::readSafetensors(single.string());
  if (!std::filesystem::exists(index, ec)) {
    const bool pickle = std::filesystem::exists(dir / "pytorch_model.bin", ec);
    return makeError("{}: no model.safetensors (nor model.safetensors.index.json){}", dir.string(),
                     pickle ? ": pytorch_model.bin is a pickle, which kiln does not read; save the "
                              "model with safe_serialization=True"
                            : "");
  }
  Expected<Json> json = readJsonFile(index.string());
  if (!json)
    return json.error();
  auto map = json->find("weight_map");
  if (map == json->end() || !map->is_object())
    return makeError("{}: weight_map: expected an object of tensor name -> shard file",
                     index.string());
  std::set<std::string> shards;
  for (const auto &[name, shard] : map->items()) {
    if (!shard.is_string() || shard.get<std::string>().find('/') != std::string::npos)
      return makeError("{}: weight_map.{}: expected a file name in the directory", index.string(),
                       name);
    shards.insert(shard.get<std::string>());
  }
  if (shards.empty()) // (else the missing tensors would be blamed on model.safetensors)
    return makeError("{}: weight_map names no tensors", index.string());
  SafetensorsFile all;
  std::map<std::string, std::string> shardOf; // where each tensor was found
  for (const std::string &shard : shards) {
    Expected<SafetensorsFile> part = runtime::readSafetensors((dir / shard).string());
    if (!part)
      return part.error();
    for (SafetensorsTensor &t : part->tensors) {
      if (all.find(t.name))
        return makeError("{}: tensor \"{}\" is in two shards", index.string(), t.name);
      shardOf[t.name] = shard;
      all.tensors.push_back(std::move(t));
    }
  }
  // An index that disagrees with its shards was written for other files (a shard replaced).
  for (const auto &[name, entry] : map->items()) {
    const std::string shard = entry.get<std::string>(); // (checked to be a string above)
    if (auto found = shardOf.find(name); found == shardOf.end() || found->second != shard)
      return makeError("{}: weight_map.{}: {} does not hold the tensor ({})", index.string(), name,
                       shard,
                       found == shardOf.end() ? "no shard does" : "it is in " + found->second);
  }
  return all;
}

// IEEE half -> float, exactly: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
float fromF16Bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31, exp = (h >> 10) & 0x1f,
                 mant = h & 0x3ff;
  if (exp == 0) // zero or subnormal: mant * 2^-24
    return std::bit_cast<float>(sign) + (sign ? -1.0f : 1.0f) * std::ldexp(float(mant), -24);
  if (exp == 31) // inf or NaN
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

// A tensor's elements as f32: f32, f16 and bf16 exactly, f64 rounded to nearest.
Expected<std::vector<float>> toFloats(const SafetensorsTensor &t, const std::string &where) {
  const size_t n = t.data.size() / runtime::dtypeSize(t.dtype);
  std::vector<float> out(n);
  const uint8_t *p = t.data.data();
  switch (t.dtype) {
  case SafetensorsDtype::F32:
    std::memcpy(out.data(), p, n * 4);
    break;
  case SafetensorsDtype::F64:
    for (size_t k = 0; k < n; ++k) {
      double v;
      std::memcpy(&v, p + 8 * k, 8);
      out[k] = static_cast<float>(v);
    }
    break;
  case SafetensorsDtype::BF16:
    for (size_t k = 0; k < n; ++k) {
      uint16_t b;
      std::memcpy(&b, p + 2 * k, 2);
      out[k] = fromBf16Bits(b);
    }
    break;
  case SafetensorsDtype::F16:
    for (size_t k = 0; k < n; ++k) {
      uint16_t h;
      std::memcpy(&h, p + 2 * k, 2);
      out[k] = fromF16Bits(h);
    }
    break;
  default:
    return makeError("{}: tensor \"{}\" is {}, expected a float dtype (F32, F16, BF16, F64)", where,
                     t.name, runtime::dtypeName(t.dtype));
  }
  for (size_t k = 0; k < n; ++k)
    if (!std::isfinite(out[k])) {
      double v = out[k]; // an F64 element beyond f32's range is finite, and overflows
      if (t.dtype == SafetensorsDtype::F64)
        std::memcpy(&v, p + 8 * k, 8);
      return makeError("{}: tensor \"{}\": element {} {}", where, t.name, k,
                       std::isfinite(v) ? fmt::format("= {} is beyond f32's range (kiln's weights "
                                                      "are f32: at most 3.4e38 in magnitude)",
                                                      v)
                                        : "is not a finite number");
    }
  return out;
}

SafetensorsTensor f32Tensor(std::string name, std::vector<int64_t> shape,
                            const std::vector<float> &values) {
  SafetensorsTensor t{.name = std::move(name),
                      .dtype = SafetensorsDtype::F32,
                      .shape = std::move(shape),
                      .data = {}};
  t.data.resize(values.size() * 4);
  std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

// The kiln tensor a rule cuts out of its HF tensor's data `in` (TensorRule::hfIndex).
std::vector<float> cutPiece(const std::vector<float> &in, const TensorRule &r) {
  int64_t n = 1;
  for (int64_t dim : r.kilnShape)
    n *= dim;
  const int64_t rowLength = n / r.kilnShape[0];
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t o = 0; o < r.kilnShape[0]; ++o)
    for (int64_t i = 0; i < rowLength; ++i)
      out[static_cast<size_t>(o * rowLength + i)] =
          in[static_cast<size_t>(r.hfIndex(o, i))] + r.plus;
  return out;
}

// The inverse: writes the kiln tensor `piece` into its place in `hf`.
void putPiece(std::vector<float> &hf, const std::vector<float> &piece, const TensorRule &r) {
  const int64_t rowLength = static_cast<int64_t>(piece.size()) / r.kilnShape[0];
  for (int64_t o = 0; o < r.kilnShape[0]; ++o)
    for (int64_t i = 0; i < rowLength; ++i)
      hf[static_cast<size_t>(r.hfIndex(o, i))] =
          piece[static_cast<size_t>(o * rowLength + i)] - r.plus;
}

// The file's tensor for `hfName`: under that name, or without the body prefix (a checkpoint of
// the bare body), or for a tied embedding the head's (save_pretrained keeps one of two names
// that share storage).
const SafetensorsTensor *findHf(const SafetensorsFile &f, const Architecture &a,
                                const std::string &hfName, bool tiedEmbedding) {
  if (const SafetensorsTensor *t = f.find(hfName))
    return t;
  if (hfName.starts_with(a.bodyPrefix))
    if (const SafetensorsTensor *t = f.find(hfName.substr(a.bodyPrefix.size())))
      return t;
  if (tiedEmbedding)
    return f.find("lm_head.weight");
  return nullptr;
}

// The ids a generated text ends at, as transformers' generate takes them: eos_token_id of
// generation_config.json if that file names one, else of config.json; an id or a list of them
// (Llama 3.1 Instruct ends at any of [128001, 128008, 128009]). None named (no file or key, null,
// []): no ids, and generation ends at the tokenizer's EOS. An id past the vocabulary is kept as
// transformers keeps it (GPT2Config's default 50256 stays in configs of smaller vocabularies): no
// generated token is one, so it never ends a text, and export writes it back. Sets the ids and
// the file they come from; errors name the file and the key.
Status readEndTokens(const std::filesystem::path &dir, const Json &config, DescribedWeights &out) {
  auto names = [](const Json &file) {
    auto id = file.find("eos_token_id");
    return id != file.end() && !id->is_null() && !(id->is_array() && id->empty()) ? &*id : nullptr;
  };
  const Json *named = names(config);
  std::string file = "config.json";
  Expected<Json> generation = Json();
  std::error_code ec;
  if (std::filesystem::exists(dir / "generation_config.json", ec)) {
    generation = readJsonFile((dir / "generation_config.json").string());
    if (!generation)
      return generation.error();
    if (const Json *id = names(*generation))
      named = id, file = "generation_config.json";
  }
  if (!named)
    return {};
  const Json ids = named->is_array() ? *named : Json::array({*named});
  for (const Json &id : ids) {
    const std::optional<int32_t> token = runtime::tokenIdIn(id);
    if (!token)
      return makeError("{}: eos_token_id: expected a token id (a whole number from 0) or a list "
                       "of them, got {}",
                       (dir / file).string(), named->dump());
    out.description.endTokens.push_back(*token);
  }
  out.endTokensFrom = file;
  return {};
}

Expected<models::GptConfig> gptOf(const std::vector<models::Setting> &settings,
                                  const std::string &where) {
  Expected<models::GptConfig> c = models::gptConfig(settings);
  if (!c)
    return makeError("{}: {}", where, c.error().message);
  return c;
}

} // namespace

Expected<DescribedWeights> importHuggingFace(const std::string &dirText) {
  const std::filesystem::path dir(dirText);
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return makeError("{}: not a directory (a Hugging Face model directory holds config.json, "
                     "model.safetensors and tokenizer.json)",
                     dirText);
  const std::string configPath = (dir / "config.json").string();
  Expected<Json> config = readJsonFile(configPath);
  if (!config)
    return config.error();
  auto prefixed = [&](const Error &e) {
    return Error{dirText + "/" + e.message}; // "DIR/config.json: KEY: ..."
  };
  Expected<const Architecture *> arch = architectureOf(*config);
  if (!arch)
    return prefixed(arch.error());
  const Architecture &a = **arch;
  Expected<ImportedConfig> imported = a.readConfig(*config);
  if (!imported)
    return prefixed(imported.error());
  Expected<models::GptConfig> c = gptOf(imported->settings, configPath);
  if (!c)
    return c.error();

  Expected<SafetensorsFile> file = readWeights(dir);
  if (!file)
    return file.error();
  // (A sharded model's tensors are named by its index, which says the shard of each.)
  const std::string weightsName = (std::filesystem::exists(dir / "model.safetensors", ec)
                                       ? dir / "model.safetensors"
                                       : dir / "model.safetensors.index.json")
                                      .string();
  DescribedWeights out;
  for (const std::string &note : imported->notes)
    out.notes.push_back(dirText + "/" + note); // as prefixed's errors
  out.architecture = std::string(a.name);
  if (auto archs = config->find("architectures"); archs != config->end() && archs->is_array())
    out.architecture = (*archs)[0].get<std::string>(); // (checked by architectureOf)
  out.description.hfArchitecture = out.architecture;
  std::set<const SafetensorsTensor *> used;
  for (const TensorRule &r : a.rules(*c)) {
    const bool tiedEmbedding = c->tieEmbeddings && r.kiln == "tok_embed.weight";
    const SafetensorsTensor *t = findHf(*file, a, r.hf, tiedEmbedding);
    if (!t)
      return makeError("{}: tensor \"{}\" is missing (kiln's \"{}\")", weightsName, r.hf, r.kiln);
    if (t->shape != r.hfShape())
      return makeError("{}: tensor \"{}\" is [{}], expected [{}] for config.json's sizes",
                       weightsName, t->name, fmt::join(t->shape, ","), fmt::join(r.hfShape(), ","));
    Expected<std::vector<float>> values = toFloats(*t, weightsName);
    if (!values)
      return values.error();
    out.weights.tensors.push_back(f32Tensor(r.kiln, r.kilnShape, cutPiece(*values, r)));
    used.insert(t);
  }
  for (const SafetensorsTensor &t : file->tensors) {
    bool ignored = used.count(&t) > 0 || (c->tieEmbeddings && t.name == "lm_head.weight");
    for (std::string_view suffix : a.ignoredSuffixes)
      ignored = ignored || t.name.ends_with(suffix);
    if (!ignored)
      return makeError("{}: tensor \"{}\" is not one of {}'s weights as config.json describes it",
                       weightsName, t.name, a.name);
  }

  out.description.model = "gpt";
  for (const models::Setting &s : imported->settings)
    out.description.settings.emplace_back(s.key, s.value);
  // tokenizer.json, else (GPT-2) its older pair vocab.json + merges.txt, kept as the tokenizer.json
  // they make: without it the checkpoint's ids were read as bytes, and GPT-2 wrote garbage.
  const std::string tokenizerPath = (dir / "tokenizer.json").string(),
                    vocabPath = (dir / "vocab.json").string(),
                    mergesPath = (dir / "merges.txt").string();
  std::optional<std::string> tokenizerJson;
  std::string tokenizerName = tokenizerPath;
  Expected<runtime::Tokenizer> tok = runtime::Tokenizer::bytes();
  const bool hasVocab = std::filesystem::exists(vocabPath, ec),
             hasMerges = std::filesystem::exists(mergesPath, ec);
  if (std::filesystem::exists(tokenizerPath, ec)) {
    Expected<std::string> text = runtime::readInputText(tokenizerPath);
    if (!text)
      return text.error();
    tok = runtime::Tokenizer::parse(*text, tokenizerPath);
    tokenizerJson = std::move(*text);
  } else if (hasVocab || hasMerges) {
    if (a.name != "GPT2LMHeadModel") // (GPT-2's byte-level split is what the pair means)
      return makeError("{}: no tokenizer.json, and vocab.json with merges.txt are read as "
                       "GPT-2's tokenizer only: give {}'s tokenizer.json",
                       dirText, out.architecture);
    if (!hasVocab || !hasMerges)
      return makeError("{}: no tokenizer.json, and GPT-2's vocab.json comes with merges.txt: {} "
                       "is missing",
                       dirText, hasVocab ? "merges.txt" : "vocab.json");
    tok = runtime::Tokenizer::loadVocabMerges(vocabPath, mergesPath);
    if (tok)
      tokenizerJson = tok->toJson();
    tokenizerName = vocabPath;
  }
  if (!tok)
    return tok.error();
  if (tokenizerJson) {
    if (tok->vocabSize() > c->vocab)
      return makeError("{}: the tokenizer has {} tokens, more than the model's vocab_size {} "
                       "(config.json): its ids past {} have no embedding",
                       tokenizerName, tok->vocabSize(), c->vocab, c->vocab - 1);
    out.description.tokenizerJson = std::move(*tokenizerJson);
  }
  out.drawnIds = tokenizerJson ? tok->vocabSize() : c->vocab;
  if (Status s = readEndTokens(dir, *config, out); !s)
    return s.error();
  out.weights.metadata["format"] = "pt";
  out.weights.metadata["graph"] = "gpt";
  runtime::describeIn(out.description, out.weights.metadata);
  return out;
}

std::vector<std::string> exportedArchitectures() {
  std::vector<std::string> names;
  for (const Architecture *a : kArchitectures)
    names.emplace_back(a->name);
  return names;
}

Expected<HuggingFaceFiles> exportHuggingFace(const runtime::ModelDescription &d,
                                             const SafetensorsFile &checkpoint,
                                             std::string_view architecture) {
  if (d.model != "gpt")
    return makeError("model {}: kiln exports gpt models (GPT-2 or LLaMA layout), not {}", d.model,
                     d.model);
  std::vector<models::Setting> settings;
  for (const auto &[key, value] : d.settings)
    settings.push_back({key, value});
  Expected<models::GptConfig> c = gptOf(settings, "the checkpoint's settings");
  if (!c)
    return c.error();
  const Architecture *arch = nullptr;
  if (!architecture.empty()) {
    for (const Architecture *a : kArchitectures)
      if (a->name == architecture)
        arch = a;
    if (!arch)
      return makeError("--architecture {}: not a class kiln exports ({})", architecture,
                       fmt::join(exportedArchitectures(), ", "));
    if (Status s = arch->fits(*c); !s)
      return makeError("--architecture {}: the checkpoint's gpt does not fit it: {}", architecture,
                       s.error().message);
  }
  for (const Architecture *a : kArchitectures) // the class it came from, where it still fits
    if (!arch && a->name == d.hfArchitecture && a->fits(*c))
      arch = a;
  std::vector<std::string> misfits;
  for (const Architecture *a : kArchitectures) {
    if (arch)
      break;
    if (Status s = a->fits(*c); s)
      arch = a;
    else
      misfits.push_back(fmt::format("not {}: {}", a->name, s.error().message));
  }
  if (!arch)
    return makeError("the checkpoint's gpt has no Hugging Face layout: {}",
                     fmt::join(misfits, "; "));

  HuggingFaceFiles out;
  Json config = arch->writeConfig(*c);
  // The ids generation ends at (the imported config's eos_token_id), else the tokenizer's EOS,
  // and its BOS (Tokenizer::beginId: GPT-2's is its EOS, as GPT-2's own config.json says):
  // transformers' generate stops at eos_token_id, and without the keys takes its class's defaults
  // (GPT-2's 50256, Llama's 1 and 2: other tokens, or bytes, here); null where there is none
  // (byte tokens).
  std::optional<int32_t> bos, eos;
  if (!d.tokenizerJson.empty()) {
    Expected<runtime::Tokenizer> tok =
        runtime::Tokenizer::parse(d.tokenizerJson, "the checkpoint's tokenizer");
    if (!tok)
      return tok.error();
    eos = tok->eosId(), bos = tok->beginId();
  }
  config["bos_token_id"] = bos ? Json(*bos) : Json(nullptr);
  config["eos_token_id"] = d.endTokens.size() > 1 ? Json(d.endTokens)
                           : !d.endTokens.empty() ? Json(d.endTokens[0])
                           : eos                  ? Json(*eos)
                                                  : Json(nullptr);
  out.architecture = config["architectures"][0].get<std::string>();
  out.configJson = config.dump(2) + "\n";
  out.tokenizerJson = d.tokenizerJson;
  out.model.metadata["format"] = "pt";
  // The HF tensors in the rules' order, each filled piece by piece.
  std::map<std::string, size_t> index;
  std::vector<std::vector<float>> values;
  for (const TensorRule &r : arch->rules(*c)) {
    const SafetensorsTensor *t = checkpoint.find(r.kiln);
    if (!t)
      return makeError("tensor \"{}\" is missing from the checkpoint", r.kiln);
    if (t->shape != r.kilnShape)
      return makeError("tensor \"{}\" is [{}] in the checkpoint, its settings make it [{}]", r.kiln,
                       fmt::join(t->shape, ","), fmt::join(r.kilnShape, ","));
    Expected<std::vector<float>> piece = toFloats(*t, "the checkpoint");
    if (!piece)
      return piece.error();
    auto [it, fresh] = index.try_emplace(r.hf, out.model.tensors.size());
    if (fresh) {
      int64_t n = 1;
      for (int64_t dim : r.hfShape())
        n *= dim;
      out.model.tensors.push_back(
          {.name = r.hf, .dtype = SafetensorsDtype::F32, .shape = r.hfShape(), .data = {}});
      values.emplace_back(static_cast<size_t>(n));
    }
    putPiece(values[it->second], *piece, r);
  }
  for (size_t k = 0; k < values.size(); ++k)
    out.model.tensors[k] =
        f32Tensor(out.model.tensors[k].name, out.model.tensors[k].shape, values[k]);
  return out;
}

} // namespace kiln::interop
