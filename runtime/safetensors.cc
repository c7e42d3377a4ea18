// Safetensors loading and saving (see safetensors.h). Loading applies the reference
// implementation's rules (huggingface/safetensors, tensor.rs) and names the first violation;
// saving reproduces its byte layout and adds the temp-file/fsync/rename discipline it lacks.
#include "runtime/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cerrno>
#include <limits>
#include <set>
#include <utility>

#include <fmt/ranges.h>

#include "runtime/json_text.h"
#include "runtime/posix_file.h"
#include "support/utf8.h"

namespace kiln::runtime {
namespace {

// The reference implementation refuses larger headers; so do we, before allocating one.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// Sizes are int64 elsewhere in kiln (shapes, arena offsets); no tensor may exceed this.
constexpr uint64_t kMaxTensorBytes = std::numeric_limits<int64_t>::max();

struct DtypeInfo {
  SafetensorsDtype dtype;
  std::string_view name;
  size_t size;
  // Position in the reference implementation's `Dtype` enum, which is in increasing alignment
  // order; saving sorts by it (descending) to match the reference byte for byte.
  int referenceRank;
};

// In SafetensorsDtype order.
constexpr std::array<DtypeInfo, 10> kDtypes = {{
    {SafetensorsDtype::F64, "F64", 8, 12},
    {SafetensorsDtype::F32, "F32", 4, 11},
    {SafetensorsDtype::F16, "F16", 2, 7},
    {SafetensorsDtype::BF16, "BF16", 2, 8},
    {SafetensorsDtype::I64, "I64", 8, 13},
    {SafetensorsDtype::I32, "I32", 4, 9},
    {SafetensorsDtype::I16, "I16", 2, 5},
    {SafetensorsDtype::I8, "I8", 1, 2},
    {SafetensorsDtype::U8, "U8", 1, 1},
    {SafetensorsDtype::Bool, "BOOL", 1, 0},
}};

// Dtypes of the format that kiln does not read: named as "not supported" rather than "unknown",
// so the user learns that the file is fine and kiln is the limit.
constexpr std::array<std::string_view, 10> kUnsupportedDtypes = {
    "U16", "U32", "U64", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64"};

const DtypeInfo &info(SafetensorsDtype dtype) {
  const DtypeInfo &d = kDtypes[static_cast<size_t>(dtype)];
  assert(d.dtype == dtype);
  return d;
}

std::string dtypeList() {
  std::string out;
  for (const DtypeInfo &d : kDtypes)
    out += fmt::format("{}{}", out.empty() ? "" : ", ", d.name);
  return out;
}

// numel(shape) * dtypeSize, or nullopt if a dim is negative or the product passes int64.
std::optional<uint64_t> byteSize(SafetensorsDtype dtype, std::span<const int64_t> shape) {
  if (std::any_of(shape.begin(), shape.end(), [](int64_t dim) { return dim < 0; }))
    return std::nullopt;
  // Any dim of 0 makes an empty tensor however large the others are.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end())
    return 0;
  uint64_t bytes = dtypeSize(dtype);
  for (int64_t dim : shape)
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(dim), &bytes))
      return std::nullopt;
  if (bytes > kMaxTensorBytes)
    return std::nullopt;
  return bytes;
}

// "F32[4,8]", as the IR writes types.
std::string typeString(SafetensorsDtype dtype, std::span<const int64_t> shape) {
  return fmt::format("{}[{}]", dtypeName(dtype), fmt::join(shape, ","));
}

// "tensor \"a\"" or "\"__metadata__\"": how an error names a header entry.
std::string describe(const std::string &key) {
  return key == "__metadata__" ? jsonQuote(key) : "tensor " + jsonQuote(key);
}

// A JSON value in an error, cut short: a header may be 100 MB of one array.
std::string brief(const Json &v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  return s.size() <= 40 ? s : s.substr(0, 37) + "...";
}

std::optional<uint64_t> asCount(const Json &v) {
  if (v.is_number_unsigned())
    return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() == 0) // "-0"
    return 0;
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Loading

// What the header says about one tensor, checked against the data buffer's size.
struct Entry {
  std::string name;
  SafetensorsDtype dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end; // relative to the data buffer
};

struct Layout {
  uint64_t headerBytes = 0;   // N; the data buffer starts at file byte 8 + N
  std::vector<Entry> entries; // in data order
  std::map<std::string, std::string> metadata;
};

// The 8-byte little-endian header length N, checked against the limit and the file size.
// `prefix` holds the file's first min(8, fileSize) bytes.
Expected<uint64_t> readHeaderLength(std::span<const uint8_t> prefix, uint64_t fileSize) {
  if (fileSize < 8)
    return makeError("byte 0: file is {} bytes, too short for the 8-byte header length", fileSize);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = n << 8 | prefix[i];
  if (n > kMaxHeaderBytes) // (what any other kind of file's first 8 bytes read as, mostly)
    return makeError("byte 0: header length {} is over the limit of {} bytes: not a safetensors "
                     "file",
                     n, kMaxHeaderBytes);
  if (n > fileSize - 8)
    return makeError("byte 0: header length {} runs past the end of the file ({} bytes follow "
                     "the length)",
                     n, fileSize - 8);
  return n;
}

// Parses the header text: syntax errors and excessive nesting at their file byte, duplicate keys
// (which JSON parsers otherwise resolve silently, one way or the other) by name.
Expected<JsonText> parseHeader(std::string_view text) {
  return readJson(
      text, {.base = 8,
             .what = "header",
             .duplicate = [](const std::vector<std::string> &path, const std::string &key) {
               return path.empty() ? makeError("{} appears twice in the header", describe(key))
                                   : makeError("{}: key {} appears twice", describe(path[0]),
                                               jsonQuote(key));
             }});
}

Status readMetadata(const Json &v, std::map<std::string, std::string> &out) {
  if (v.is_null()) // the reference implementation reads null as "no metadata"
    return {};
  if (!v.is_object())
    return makeError("\"__metadata__\" must be an object mapping strings to strings, got {}",
                     brief(v));
  for (const auto &[key, value] : v.items()) {
    if (!value.is_string())
      return makeError("\"__metadata__\" must map strings to strings, but {} holds {}",
                       jsonQuote(key), brief(value));
    out.emplace(key, value.get<std::string>());
  }
  return {};
}

Expected<SafetensorsDtype> readDtype(const std::string &where, const Json &v) {
  if (!v.is_string())
    return makeError("{}: \"dtype\" must be a string such as \"F32\", got {}", where, brief(v));
  const std::string &name = v.get_ref<const std::string &>();
  if (std::optional<SafetensorsDtype> dtype = parseDtypeName(name))
    return *dtype;
  bool known = std::find(kUnsupportedDtypes.begin(), kUnsupportedDtypes.end(), name) !=
               kUnsupportedDtypes.end();
  return makeError("{}: {} dtype {} (kiln reads {})", where, known ? "unsupported" : "unknown",
                   jsonQuote(name), dtypeList());
}

Expected<std::vector<int64_t>> readShape(const std::string &where, const Json &v) {
  if (!v.is_array())
    return makeError("{}: \"shape\" must be an array of non-negative integers, got {}", where,
                     brief(v));
  std::vector<int64_t> shape;
  for (size_t i = 0; i < v.size(); ++i) {
    std::optional<uint64_t> dim = asCount(v[i]);
    if (!dim)
      return makeError("{}: shape[{}] must be a non-negative integer, got {}", where, i,
                       brief(v[i]));
    if (*dim > kMaxTensorBytes)
      return makeError("{}: shape[{}] = {} is larger than 2^63-1", where, i, *dim);
    shape.push_back(static_cast<int64_t>(*dim));
  }
  return shape;
}

Expected<std::pair<uint64_t, uint64_t>> readOffsets(const std::string &where, const Json &v) {
  if (!v.is_array() || v.size() != 2)
    return makeError("{}: \"data_offsets\" must be [begin, end], got {}", where, brief(v));
  std::optional<uint64_t> bounds[2];
  for (size_t i = 0; i < 2; ++i) {
    bounds[i] = asCount(v[i]);
    if (!bounds[i])
      return makeError("{}: data_offsets[{}] must be a non-negative integer, got {}", where, i,
                       brief(v[i]));
  }
  return std::pair{*bounds[0], *bounds[1]};
}

// One header entry, checked on its own: fields, types, and offsets against the buffer size.
Expected<Entry> readEntry(const std::string &name, const Json &v, uint64_t bufferBytes) {
  const std::string where = describe(name);
  if (!v.is_object())
    return makeError("{}: entry must be an object with \"dtype\", \"shape\" and "
                     "\"data_offsets\", got {}",
                     where, brief(v));
  // Other keys are ignored, as the reference implementation does.
  for (const char *key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key))
      return makeError("{}: missing \"{}\"", where, key);

  Expected<SafetensorsDtype> dtype = readDtype(where, v["dtype"]);
  if (!dtype)
    return dtype.error();
  Expected<std::vector<int64_t>> shape = readShape(where, v["shape"]);
  if (!shape)
    return shape.error();
  Expected<std::pair<uint64_t, uint64_t>> offsets = readOffsets(where, v["data_offsets"]);
  if (!offsets)
    return offsets.error();
  auto [begin, end] = *offsets;

  if (begin > end)
    return makeError("{}: data_offsets [{}, {}] end before they begin", where, begin, end);
  if (end > bufferBytes)
    return makeError("{}: data_offsets [{}, {}] run past the end of the {}-byte data buffer", where,
                     begin, end, bufferBytes);
  std::optional<uint64_t> bytes = byteSize(*dtype, *shape);
  if (!bytes)
    return makeError("{}: {} is larger than 2^63-1 bytes", where, typeString(*dtype, *shape));
  if (end - begin != *bytes)
    return makeError("{}: data_offsets [{}, {}] hold {} bytes but {} needs {}", where, begin, end,
                     end - begin, typeString(*dtype, *shape), *bytes);
  return Entry{name, *dtype, std::move(*shape), begin, end};
}

// The tensors must tile the data buffer exactly: in offset order, each begins where the previous
// ends, and the last ends at the end of the file.
Status checkTiling(const Layout &layout, uint64_t bufferBytes) {
  uint64_t pos = 0;
  const Entry *prev = nullptr;
  for (const Entry &e : layout.entries) {
    const std::string where = describe(e.name);
    if (e.begin < pos)
      return makeError("{}: data_offsets [{}, {}] overlap the previous tensor {} (ends at {})",
                       where, e.begin, e.end, jsonQuote(prev->name), pos);
    if (e.begin > pos && prev)
      return makeError("{}: data_offsets [{}, {}] leave {} bytes unused after the previous "
                       "tensor {} (ends at {})",
                       where, e.begin, e.end, e.begin - pos, jsonQuote(prev->name), pos);
    if (e.begin > pos)
      return makeError("{}: data_offsets [{}, {}] leave {} bytes unused at the start of the "
                       "data buffer",
                       where, e.begin, e.end, e.begin);
    pos = e.end;
    prev = &e;
  }
  if (pos != bufferBytes)
    return makeError("byte {}: {} bytes of data after {}", 8 + layout.headerBytes + pos,
                     bufferBytes - pos, prev ? "the last tensor" : "a header with no tensors");
  return {};
}

// Everything but the tensor bytes: the header, validated against a file of `fileSize` bytes.
Expected<Layout> readLayout(std::string_view header, uint64_t fileSize) {
  Layout layout;
  layout.headerBytes = header.size();
  const uint64_t bufferBytes = fileSize - 8 - header.size();
  Expected<JsonText> json = parseHeader(header);
  if (!json)
    return json.error();
  if (!json->value.is_object())
    return makeError("byte 8: header must be a JSON object mapping tensor names to their "
                     "dtype, shape and data_offsets, got {}",
                     brief(json->value));
  // In file order, so that "the first problem" is the first in the file.
  for (const std::string &name : json->topKeys) {
    const Json &value = json->value.at(name);
    if (name == "__metadata__") {
      if (Status s = readMetadata(value, layout.metadata); !s)
        return s.error();
      continue;
    }
    Expected<Entry> entry = readEntry(name, value, bufferBytes);
    if (!entry)
      return entry.error();
    layout.entries.push_back(std::move(*entry));
  }
  // JSON key order carries no meaning; the data order does. Stable, so that empty tensors at the
  // same offset keep the header's order.
  std::stable_sort(layout.entries.begin(), layout.entries.end(),
                   [](const Entry &a, const Entry &b) {
                     return std::pair{a.begin, a.end} < std::pair{b.begin, b.end};
                   });
  if (Status s = checkTiling(layout, bufferBytes); !s)
    return s.error();
  return layout;
}

SafetensorsTensor tensorOf(Entry &e) {
  return SafetensorsTensor{std::move(e.name), e.dtype, std::move(e.shape), {}};
}

// Reads exactly `n` bytes at `offset`; pread may return fewer.
Status readFully(int fd, uint8_t *dst, size_t n, uint64_t offset) {
  while (n > 0) {
    ssize_t got = ::pread(fd, dst, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      return makeError("byte {}: cannot read: {}", offset, errnoText(errno));
    if (got == 0)
      return makeError("byte {}: file ended early (was it changed while being read?)", offset);
    dst += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// Saving

// The length prefix plus the padded header, and the tensors in the order their data follows.
struct Prepared {
  std::vector<uint8_t> head;
  std::vector<const SafetensorsTensor *> order;
};

Prepared prepare(const SafetensorsFile &file) {
  Prepared p;
  for (const SafetensorsTensor &t : file.tensors)
    p.order.push_back(&t);
  // Descending alignment first, so every tensor's data is aligned to its element size.
  std::sort(p.order.begin(), p.order.end(), [](const auto *a, const auto *b) {
    int ra = info(a->dtype).referenceRank, rb = info(b->dtype).referenceRank;
    return ra != rb ? ra > rb : a->name < b->name;
  });

  // Written by hand rather than by nlohmann, whose objects sort or keep insertion order but
  // cannot be told the reference implementation's key order. Compact, as serde_json writes it.
  std::string json = "{";
  if (!file.metadata.empty()) {
    json += "\"__metadata__\":{";
    for (const auto &[key, value] : file.metadata)
      json += (json.back() == '{' ? "" : ",") + jsonQuote(key) + ":" + jsonQuote(value);
    json += "}";
  }
  uint64_t offset = 0;
  for (const SafetensorsTensor *t : p.order) {
    json += fmt::format("{}{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                        json.size() == 1 ? "" : ",", jsonQuote(t->name), dtypeName(t->dtype),
                        fmt::join(t->shape, ","), offset, offset + t->data.size());
    offset += t->data.size();
  }
  json += "}";
  // Pad with spaces (JSON whitespace) so the data buffer starts at a multiple of 8.
  json.append((8 - json.size() % 8) % 8, ' ');

  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i)
    p.head.push_back(static_cast<uint8_t>(n >> (8 * i)));
  p.head.insert(p.head.end(), json.begin(), json.end());
  return p;
}

} // namespace

std::string_view dtypeName(SafetensorsDtype dtype) {
  return info(dtype).name;
}

size_t dtypeSize(SafetensorsDtype dtype) {
  return info(dtype).size;
}

std::optional<SafetensorsDtype> parseDtypeName(std::string_view name) {
  for (const DtypeInfo &d : kDtypes)
    if (d.name == name)
      return d.dtype;
  return std::nullopt;
}

const SafetensorsTensor *SafetensorsFile::find(std::string_view name) const {
  for (const SafetensorsTensor &t : tensors)
    if (t.name == name)
      return &t;
  return nullptr;
}

Expected<SafetensorsFile> parseSafetensors(std::span<const uint8_t> bytes) {
  Expected<uint64_t> n =
      readHeaderLength(bytes.first(std::min<size_t>(8, bytes.size())), bytes.size());
  if (!n)
    return n.error();
  std::string_view header(reinterpret_cast<const char *>(bytes.data()) + 8, *n);
  Expected<Layout> layout = readLayout(header, bytes.size());
  if (!layout)
    return layout.error();
  SafetensorsFile file;
  file.metadata = std::move(layout->metadata);
  const uint8_t *buffer = bytes.data() + 8 + *n;
  for (Entry &e : layout->entries) {
    SafetensorsTensor &t = file.tensors.emplace_back(tensorOf(e));
    t.data.assign(buffer + e.begin, buffer + e.end);
  }
  return file;
}

Expected<SafetensorsFile> readSafetensors(const std::string &path,
                                          std::optional<std::vector<std::string>> only) {
  auto fail = [&](const Error &e) { return Error{path + ": " + e.message}; };
  // O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever; the fstat below then
  // rejects anything but a regular file, for which the flag means nothing.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.fd < 0)
    return makeError("{}: cannot open: {}", path, errnoText(errno));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0)
    return makeError("{}: cannot stat: {}", path, errnoText(errno));
  if (!S_ISREG(st.st_mode))
    return makeError("{}: not a regular file (a checkpoint is read whole, with its size known)",
                     path);
  const uint64_t fileSize = static_cast<uint64_t>(st.st_size);

  uint8_t prefix[8] = {};
  const size_t prefixBytes = std::min<uint64_t>(8, fileSize);
  if (Status s = readFully(fd.fd, prefix, prefixBytes, 0); !s)
    return fail(s.error());
  Expected<uint64_t> n = readHeaderLength({prefix, prefixBytes}, fileSize);
  if (!n)
    return fail(n.error());
  std::string header(*n, '\0');
  if (Status s = readFully(fd.fd, reinterpret_cast<uint8_t *>(header.data()), *n, 8); !s)
    return fail(s.error());
  Expected<Layout> layout = readLayout(header, fileSize);
  if (!layout)
    return fail(layout.error());

  SafetensorsFile file;
  file.metadata = std::move(layout->metadata);
  for (Entry &e : layout->entries) {
    if (only && std::find(only->begin(), only->end(), e.name) == only->end()) {
      file.unread.push_back(e.name);
      continue;
    }
    SafetensorsTensor &t = file.tensors.emplace_back(tensorOf(e));
    // Sized by validated offsets, which the file size bounds.
    t.data.resize(e.end - e.begin);
    if (Status s = readFully(fd.fd, t.data.data(), t.data.size(), 8 + *n + e.begin); !s)
      return fail(s.error());
  }
  return file;
}

Status checkSafetensors(const SafetensorsFile &file) {
  std::set<std::string_view> names;
  for (const SafetensorsTensor &t : file.tensors) {
    const std::string where = "tensor " + jsonQuote(t.name);
    if (t.name == "__metadata__")
      return makeError("{}: the name is reserved for the header's metadata", where);
    if (!isValidUtf8(t.name))
      return makeError("{}: the name is not valid UTF-8", where);
    if (!names.insert(t.name).second)
      return makeError("{}: two tensors have this name", where);
    for (size_t i = 0; i < t.shape.size(); ++i)
      if (t.shape[i] < 0)
        return makeError("{}: shape[{}] is {}", where, i, t.shape[i]);
    std::optional<uint64_t> bytes = byteSize(t.dtype, t.shape);
    if (!bytes)
      return makeError("{}: {} is larger than 2^63-1 bytes", where, typeString(t.dtype, t.shape));
    if (t.data.size() != *bytes)
      return makeError("{}: {} needs {} bytes but the tensor holds {}", where,
                       typeString(t.dtype, t.shape), *bytes, t.data.size());
  }
  for (const auto &[key, value] : file.metadata)
    if (!isValidUtf8(key) || !isValidUtf8(value))
      return makeError("metadata {}: not valid UTF-8", jsonQuote(key));
  return {};
}

std::vector<uint8_t> serializeSafetensors(const SafetensorsFile &file) {
  assert(checkSafetensors(file).ok());
  Prepared p = prepare(file);
  std::vector<uint8_t> out = std::move(p.head);
  for (const SafetensorsTensor *t : p.order)
    out.insert(out.end(), t->data.begin(), t->data.end());
  return out;
}

Status writeSafetensors(const std::string &path, const SafetensorsFile &file,
                        const WriteOptions &options) {
  if (Status s = checkSafetensors(file); !s)
    return makeError("{}: {}", path, s.error().message);
  const Prepared p = prepare(file);
  std::vector<std::span<const uint8_t>> pieces{p.head};
  for (const SafetensorsTensor *t : p.order)
    pieces.push_back(t->data);
  return writeOutputFile(path, pieces, options);
}

} // namespace kiln::runtime
