// Checkpoints in the safetensors format (HuggingFace's, so PyTorch can read and write them): load
// with every length, offset, dtype and shape checked before use, save atomically (temp file,
// fsync, rename) so that an interrupted save never destroys the previous checkpoint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/output_file.h"
#include "support/status.h"

namespace kiln::runtime {

// Element types a safetensors file may hold that kiln reads. The IR computes in F32, F64, BF16,
// I32, I64 and BOOL; F16, I8, U8 and I16 are read (their bytes are kept) so that whoever maps a
// checkpoint onto a graph can name the tensor it cannot use, instead of failing on the whole file.
// Other dtypes of the format (U16, U32, U64, F8_*, ...) are rejected when loading.
enum class SafetensorsDtype : uint8_t { F64, F32, F16, BF16, I64, I32, I16, I8, U8, Bool };

// The format's spelling: "F32", "BF16", "BOOL", ...
std::string_view dtypeName(SafetensorsDtype dtype);
// Bytes per element.
size_t dtypeSize(SafetensorsDtype dtype);
// The inverse of dtypeName; nullopt for names kiln does not read.
std::optional<SafetensorsDtype> parseDtypeName(std::string_view name);

// One tensor: row-major, little-endian bytes, `data.size() == numel(shape) * dtypeSize(dtype)`.
struct SafetensorsTensor {
  std::string name; // PyTorch-style, e.g. "blocks.0.attn.qkv.weight"
  SafetensorsDtype dtype = SafetensorsDtype::F32;
  std::vector<int64_t> shape; // [] is a scalar (one element)
  std::vector<uint8_t> data;

  bool operator==(const SafetensorsTensor &) const = default;
};

struct SafetensorsFile {
  // Loading returns the tensors in the order of their bytes in the file (which, for files the
  // reference implementation or kiln wrote, is the header's order too). Saving accepts any order.
  std::vector<SafetensorsTensor> tensors;
  // The header's optional "__metadata__" object (free-form string -> string, e.g. "format": "pt").
  std::map<std::string, std::string> metadata;
  // readSafetensors with `only`: the names of the header's other tensors, whose bytes were not
  // read (in the file's order).
  std::vector<std::string> unread;

  // nullptr when there is no tensor of that name.
  const SafetensorsTensor *find(std::string_view name) const;

  bool operator==(const SafetensorsFile &) const = default;
};

// Loading. Errors name the first problem and where it is: "byte 8: header is not valid JSON: ...",
// "tensor \"wte.weight\": data_offsets [0, 96] hold 96 bytes but F32[4,8] needs 128".
// parseSafetensors leaves the file name to the caller; readSafetensors prefixes the path.
// readSafetensors reads each tensor straight from the file, so a checkpoint is never in memory
// twice; with `only`, just the tensors of those names (the header is checked whole): what a
// caller wanting the metadata or a counter reads of a large checkpoint.
Expected<SafetensorsFile> parseSafetensors(std::span<const uint8_t> bytes);
Expected<SafetensorsFile> readSafetensors(const std::string &path,
                                          std::optional<std::vector<std::string>> only = {});

// Whether `file` can be saved: unique names other than "__metadata__", names and metadata valid
// UTF-8, non-negative dims, and data sizes that match dtype and shape.
Status checkSafetensors(const SafetensorsFile &file);

// The file's bytes. Deterministic, and byte-identical to what the reference implementation
// writes: tensors sorted by descending dtype alignment then name (so each tensor's data starts at
// a multiple of its element size), "__metadata__" first with sorted keys, and the header padded
// with spaces to a multiple of 8 so the data starts 8-byte aligned.
// Precondition: checkSafetensors(file) is ok (asserted).
std::vector<uint8_t> serializeSafetensors(const SafetensorsFile &file);

// Saves `file` to `path` with runtime::writeOutputFile (runtime/output_file.h): a regular file is
// replaced atomically (temporary file, fsync, rename, fsync of the directory), so an interrupted
// save never destroys the previous checkpoint; links are followed; devices and FIFOs are written
// through. Errors are prefixed with `path`.
Status writeSafetensors(const std::string &path, const SafetensorsFile &file,
                        const WriteOptions &options = {});

} // namespace kiln::runtime
