// Safetensors checkpoints: round trips of every dtype, the serialized bytes pinned against
// hand-written files (the reference implementation's own test vectors among them), one exact
// diagnostic per kind of malformed file, and saves that fail midway leaving the old file intact.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/safetensors.h"
#include "tests/util/temp_dir.h"

namespace kiln::runtime::safetensors_test {
namespace {

namespace fs = std::filesystem;
using D = SafetensorsDtype;

static_assert(std::endian::native == std::endian::little, "the test data is written as LE");

// The little-endian bytes of `values` (the host is little-endian, as the format is).
template <class T> std::vector<uint8_t> le(std::initializer_list<T> values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!out.empty())
    std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

std::vector<uint8_t> u64(uint64_t n) {
  return le<uint64_t>({n});
}

std::vector<uint8_t> cat(std::initializer_list<std::vector<uint8_t>> parts) {
  std::vector<uint8_t> out;
  for (const auto &p : parts)
    out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::vector<uint8_t> bytesOf(std::string_view s) {
  return {s.begin(), s.end()};
}

// A file with this exact header text (no padding) and `dataBytes` zero bytes of data.
std::vector<uint8_t> stFile(std::string_view header, size_t dataBytes = 0) {
  return cat({u64(header.size()), bytesOf(header), std::vector<uint8_t>(dataBytes, 0)});
}

SafetensorsTensor tensor(std::string name, D dtype, std::vector<int64_t> shape,
                         std::vector<uint8_t> data) {
  return {std::move(name), dtype, std::move(shape), std::move(data)};
}

std::string errorOf(std::span<const uint8_t> bytes) {
  Expected<SafetensorsFile> f = parseSafetensors(bytes);
  return f ? "(loaded)" : f.error().message;
}

// Order-insensitive comparison: loading returns data order, which saving chooses.
void expectSameTensors(SafetensorsFile a, SafetensorsFile b) {
  auto byName = [](const SafetensorsTensor &x, const SafetensorsTensor &y) {
    return x.name < y.name;
  };
  std::sort(a.tensors.begin(), a.tensors.end(), byName);
  std::sort(b.tensors.begin(), b.tensors.end(), byName);
  EXPECT_EQ(a, b);
}

// One tensor of each dtype, plus a scalar, empty tensors and metadata that needs escaping.
SafetensorsFile everyDtype() {
  SafetensorsFile f;
  f.tensors = {
      tensor("f64", D::F64, {2}, le<double>({1.5, -2.25})),
      tensor("f32", D::F32, {2, 2}, le<float>({1, 2, 3, 4})),
      tensor("f16", D::F16, {3}, le<uint16_t>({0x3c00, 0xc000, 0x7bff})),
      tensor("bf16", D::BF16, {1, 3}, le<uint16_t>({0x3f80, 0x4000, 0xff80})),
      tensor("i64", D::I64, {2}, le<int64_t>({-1, int64_t{1} << 40})),
      tensor("i32", D::I32, {3}, le<int32_t>({-7, 0, 7})),
      tensor("i16", D::I16, {1}, le<int16_t>({-300})),
      tensor("i8", D::I8, {3}, le<int8_t>({-1, 2, -3})),
      tensor("u8", D::U8, {5}, le<uint8_t>({0, 1, 128, 254, 255})),
      tensor("bool", D::Bool, {3}, le<uint8_t>({1, 0, 1})),
      tensor("scalar", D::F32, {}, le<float>({3.5f})),
      tensor("empty", D::F32, {0, 3}, {}),
      tensor("empty.too", D::I64, {4, 0}, {}),
      tensor("blocks.0.attn.qkv.weight", D::BF16, {2}, le<uint16_t>({1, 2})),
  };
  f.metadata = {{"format", "pt"}, {"note \"quoted\"\n", "ünïcödé \\ tab\t"}, {"", ""}};
  return f;
}

TEST(SafetensorsDtype, NamesAndSizes) {
  const std::pair<D, std::string_view> names[] = {
      {D::F64, "F64"}, {D::F32, "F32"}, {D::F16, "F16"}, {D::BF16, "BF16"}, {D::I64, "I64"},
      {D::I32, "I32"}, {D::I16, "I16"}, {D::I8, "I8"},   {D::U8, "U8"},     {D::Bool, "BOOL"}};
  const size_t sizes[] = {8, 4, 2, 2, 8, 4, 2, 1, 1, 1};
  for (size_t i = 0; i < std::size(names); ++i) {
    EXPECT_EQ(dtypeName(names[i].first), names[i].second);
    EXPECT_EQ(dtypeSize(names[i].first), sizes[i]) << names[i].second;
    EXPECT_EQ(parseDtypeName(names[i].second), names[i].first);
  }
  EXPECT_EQ(parseDtypeName("U16"), std::nullopt);
  EXPECT_EQ(parseDtypeName("f32"), std::nullopt); // the format's names are case-sensitive
}

TEST(SafetensorsRoundTrip, EveryDtypeScalarsEmptyTensorsAndMetadata) {
  const SafetensorsFile original = everyDtype();
  ASSERT_TRUE(checkSafetensors(original).ok());
  std::vector<uint8_t> bytes = serializeSafetensors(original);
  Expected<SafetensorsFile> loaded = parseSafetensors(bytes);
  ASSERT_TRUE(loaded) << loaded.error().message;
  expectSameTensors(original, *loaded);
  EXPECT_EQ(loaded->metadata, original.metadata);
  ASSERT_NE(loaded->find("scalar"), nullptr);
  EXPECT_EQ(loaded->find("scalar")->shape, std::vector<int64_t>{});
  EXPECT_EQ(loaded->find("nope"), nullptr);

  // The header is padded to a multiple of 8, and the alignment-descending order then puts every
  // tensor's data at a multiple of its element size (loading returns data order).
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  uint64_t offset = 8 + n;
  for (const SafetensorsTensor &t : loaded->tensors) {
    EXPECT_EQ(offset % dtypeSize(t.dtype), 0u) << t.name;
    offset += t.data.size();
  }
  EXPECT_EQ(offset, bytes.size());
  // Serializing is deterministic: the input order does not matter.
  EXPECT_EQ(serializeSafetensors(*loaded), bytes);
}

TEST(SafetensorsRoundTrip, NoTensors) {
  Expected<SafetensorsFile> loaded = parseSafetensors(serializeSafetensors({}));
  ASSERT_TRUE(loaded) << loaded.error().message;
  EXPECT_TRUE(loaded->tensors.empty());
  EXPECT_TRUE(loaded->metadata.empty());
}

// The reference implementation's own test vectors (safetensors/src/tensor.rs), spelled out.
TEST(SafetensorsSerialize, MatchesReferenceBytes) {
  SafetensorsFile empty;
  EXPECT_EQ(serializeSafetensors(empty), cat({u64(8), bytesOf("{}      ")}));

  empty.metadata = {{"framework", "pt"}};
  EXPECT_EQ(serializeSafetensors(empty),
            cat({u64(40), bytesOf(R"({"__metadata__":{"framework":"pt"}}     )")}));

  SafetensorsFile one;
  one.tensors = {tensor("attn0", D::F32, {1, 1, 2, 3}, le<float>({0, 1, 2, 3, 4, 5}))};
  EXPECT_EQ(serializeSafetensors(one),
            cat({u64(72),
                 bytesOf(R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})"
                         "       "),
                 {0, 0, 0,    0,    0, 0, 0x80, 0x3f, 0, 0, 0,    0x40,
                  0, 0, 0x40, 0x40, 0, 0, 0x80, 0x40, 0, 0, 0xa0, 0x40}}));
}

// Pins the layout: length as LE u64 (256 = 00 01 00 ..), metadata first, tensors by descending
// alignment then name, compact JSON, space padding, then the data in that order.
TEST(SafetensorsSerialize, PinsTheByteLayout) {
  SafetensorsFile f;
  f.tensors = {tensor("b", D::Bool, {3}, {1, 0, 1}), tensor("a", D::F32, {2}, le<float>({1, 2})),
               tensor("c", D::I64, {}, le<int64_t>({7})),
               tensor("d", D::F32, {1}, le<float>({-1}))};
  f.metadata = {{"format", "pt"}};
  const std::vector<uint8_t> expected = cat({
      {0x00, 0x01, 0, 0, 0, 0, 0, 0},
      bytesOf(R"({"__metadata__":{"format":"pt"},)"
              R"("c":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
              R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
              R"("d":{"dtype":"F32","shape":[1],"data_offsets":[16,20]},)"
              R"("b":{"dtype":"BOOL","shape":[3],"data_offsets":[20,23]}})"
              "       "),
      {7, 0, 0, 0, 0, 0, 0, 0},          // c
      {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40}, // a
      {0, 0, 0x80, 0xbf},                // d
      {1, 0, 1},                         // b
  });
  EXPECT_EQ(serializeSafetensors(f), expected);
}

// What other writers produce and the reference implementation accepts.
TEST(SafetensorsParse, AcceptsWhatTheReferenceAccepts) {
  // Keys out of data order, unknown fields, null metadata, "-0", whitespace padding of any kind,
  // and two empty tensors at the same offset.
  std::vector<uint8_t> bytes = cat({stFile(R"( {"b": {"dtype": "I32", "shape": [1],
      "data_offsets": [4, 8], "extra": true}, "__metadata__": null,
    "a": {"shape": [-0], "dtype": "I32", "data_offsets": [4, 4]},
    "z": {"shape": [0], "dtype": "I32", "data_offsets": [0, -0]},
    "y": {"shape": [1], "dtype": "I32", "data_offsets": [0, 4]}})"
                                           "  \t\n  "),
                                    le<int32_t>({11, 22})});
  Expected<SafetensorsFile> f = parseSafetensors(bytes);
  ASSERT_TRUE(f) << f.error().message;
  ASSERT_EQ(f->tensors.size(), 4u);
  // Data order; ties keep the header's order.
  EXPECT_EQ(f->tensors[0], tensor("z", D::I32, {0}, {}));
  EXPECT_EQ(f->tensors[1], tensor("y", D::I32, {1}, le<int32_t>({11})));
  EXPECT_EQ(f->tensors[2], tensor("a", D::I32, {0}, {}));
  EXPECT_EQ(f->tensors[3], tensor("b", D::I32, {1}, le<int32_t>({22})));
  EXPECT_TRUE(f->metadata.empty());
}

// Every length, offset and count is checked: no strict prefix of a valid file loads, and each
// says what is missing rather than reading past the end.
TEST(SafetensorsParse, EveryTruncationIsRejected) {
  const std::vector<uint8_t> bytes = serializeSafetensors(everyDtype());
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  for (size_t size = 0; size < bytes.size(); ++size) {
    std::string error = errorOf(std::span(bytes).first(size));
    if (size < 8)
      EXPECT_EQ(error, fmt::format("byte 0: file is {} bytes, too short for the 8-byte header "
                                   "length",
                                   size));
    else if (size < 8 + n)
      EXPECT_EQ(error, fmt::format("byte 0: header length {} runs past the end of the file ({} "
                                   "bytes follow the length)",
                                   n, size - 8));
    else
      EXPECT_NE(error.find("run past the end of the"), std::string::npos) << error;
  }
}

struct Malformed {
  const char *name;
  std::vector<uint8_t> bytes;
  std::string message;
};

// Names the case in failure output instead of dumping the struct's bytes.
void PrintTo(const Malformed &m, std::ostream *os) {
  *os << m.name;
}

class SafetensorsMalformed : public testing::TestWithParam<Malformed> {};

TEST_P(SafetensorsMalformed, ReportsTheFirstProblemExactly) {
  EXPECT_EQ(errorOf(GetParam().bytes), GetParam().message);
}

// An entry with the given fields' text, e.g. entry("\"dtype\":\"F32\"").
std::string entry(std::string_view name, std::string_view dtype, std::string_view shape,
                  std::string_view offsets) {
  return fmt::format(R"("{}":{{"dtype":{},"shape":{},"data_offsets":{}}})", name, dtype, shape,
                     offsets);
}

std::string obj(std::initializer_list<std::string> entries) {
  return fmt::format("{{{}}}", fmt::join(entries, ","));
}

const std::string kA4 = entry("a", R"("F32")", "[4]", "[0,16]"); // 16 bytes of data

INSTANTIATE_TEST_SUITE_P(
    Safetensors, SafetensorsMalformed,
    testing::Values(
        Malformed{
            "EmptyFile", {}, "byte 0: file is 0 bytes, too short for the 8-byte header length"},
        Malformed{"ShortFile",
                  {1, 2, 3, 4, 5},
                  "byte 0: file is 5 bytes, too short for the 8-byte header length"},
        Malformed{"HeaderLongerThanFile", cat({u64(100), bytesOf("{}")}),
                  "byte 0: header length 100 runs past the end of the file (2 bytes follow the "
                  "length)"},
        Malformed{"HugeHeaderLength", cat({u64(uint64_t{1} << 63), bytesOf("{}")}),
                  "byte 0: header length 9223372036854775808 is over the limit of 100000000 "
                  "bytes: not a safetensors file"},
        Malformed{"HeaderNotJson", stFile(R"({"a" 1})"),
                  "byte 13: header is not valid JSON: syntax error while parsing object separator "
                  "- unexpected number literal; expected ':'"},
        Malformed{"EmptyHeader", stFile(""),
                  "byte 8: header is not valid JSON: syntax error while parsing value - "
                  "unexpected end of input; expected '[', '{', or a literal"},
        Malformed{
            "HeaderNotUtf8", stFile("{\"\xff\":1}"),
            "byte 10: header is not valid JSON: syntax error while parsing object key - "
            "invalid string: ill-formed UTF-8 byte; last read: '\"\xff'; expected string literal"},
        // serde_json's limit: 128 levels. Brackets (and an escaped quote) in a key do not count.
        Malformed{"DeepNesting", stFile(std::string(200, '[')),
                  "byte 136: header nests deeper than 128 levels"},
        Malformed{"DeepNestingAfterKey",
                  stFile("{\"" + std::string(200, '[') + "\\\"\":" + std::string(130, '[')),
                  "byte 341: header nests deeper than 128 levels"},
        // A number too large for a double: nlohmann throws out_of_range, not a parse error; its
        // raw exception text must not surface.
        Malformed{"NumberOverflow", stFile(R"({"a":{"dtype":"F32","shape":[1e400]}})"),
                  "byte 37: header is not valid JSON: number overflow parsing '1e400'"},
        Malformed{"HeaderNotObject", stFile("[1,2]"),
                  "byte 8: header must be a JSON object mapping tensor names to their dtype, "
                  "shape and data_offsets, got [1,2]"},
        Malformed{"EntryNotObject", stFile(R"({"a":[0,16]})", 16),
                  "tensor \"a\": entry must be an object with \"dtype\", \"shape\" and "
                  "\"data_offsets\", got [0,16]"},
        Malformed{"MissingDtype", stFile(R"({"a":{"shape":[4],"data_offsets":[0,16]}})", 16),
                  "tensor \"a\": missing \"dtype\""},
        Malformed{"MissingShape", stFile(R"({"a":{"dtype":"F32","data_offsets":[0,16]}})", 16),
                  "tensor \"a\": missing \"shape\""},
        Malformed{"MissingOffsets", stFile(R"({"a":{"dtype":"F32","shape":[4]}})", 16),
                  "tensor \"a\": missing \"data_offsets\""},
        Malformed{"DtypeNotString", stFile(obj({entry("a", "4", "[4]", "[0,16]")}), 16),
                  "tensor \"a\": \"dtype\" must be a string such as \"F32\", got 4"},
        Malformed{"UnknownDtype", stFile(obj({entry("a", R"("F33")", "[4]", "[0,16]")}), 16),
                  "tensor \"a\": unknown dtype \"F33\" (kiln reads F64, F32, F16, BF16, I64, "
                  "I32, I16, I8, U8, BOOL)"},
        Malformed{"UnsupportedDtype", stFile(obj({entry("a", R"("U16")", "[8]", "[0,16]")}), 16),
                  "tensor \"a\": unsupported dtype \"U16\" (kiln reads F64, F32, F16, BF16, I64, "
                  "I32, I16, I8, U8, BOOL)"},
        Malformed{"ShapeNotArray", stFile(obj({entry("a", R"("F32")", "4", "[0,16]")}), 16),
                  "tensor \"a\": \"shape\" must be an array of non-negative integers, got 4"},
        Malformed{"NegativeDim", stFile(obj({entry("a", R"("F32")", "[2,-2]", "[0,16]")}), 16),
                  "tensor \"a\": shape[1] must be a non-negative integer, got -2"},
        Malformed{"FractionalDim", stFile(obj({entry("a", R"("F32")", "[4.0]", "[0,16]")}), 16),
                  "tensor \"a\": shape[0] must be a non-negative integer, got 4.0"},
        Malformed{"DimOverInt64",
                  stFile(obj({entry("a", R"("F32")", "[0,18446744073709551615]", "[0,0]")})),
                  "tensor \"a\": shape[1] = 18446744073709551615 is larger than 2^63-1"},
        Malformed{"OffsetsWrongLength", stFile(obj({entry("a", R"("F32")", "[4]", "[16]")}), 16),
                  "tensor \"a\": \"data_offsets\" must be [begin, end], got [16]"},
        Malformed{"OffsetsNotIntegers",
                  stFile(obj({entry("a", R"("F32")", "[4]", R"([0,"16"])")}), 16),
                  "tensor \"a\": data_offsets[1] must be a non-negative integer, got \"16\""},
        Malformed{"OffsetsNegative", stFile(obj({entry("a", R"("F32")", "[4]", "[-16,0]")}), 16),
                  "tensor \"a\": data_offsets[0] must be a non-negative integer, got -16"},
        Malformed{"BeginAfterEnd", stFile(obj({entry("a", R"("F32")", "[4]", "[16,0]")}), 16),
                  "tensor \"a\": data_offsets [16, 0] end before they begin"},
        Malformed{"OffsetsPastBuffer", stFile(obj({entry("a", R"("F32")", "[4]", "[8,24]")}), 16),
                  "tensor \"a\": data_offsets [8, 24] run past the end of the 16-byte data "
                  "buffer"},
        Malformed{"SizeMismatch",
                  stFile(obj({entry("wte.weight", R"("F32")", "[4,8]", "[0,96]")}), 96),
                  "tensor \"wte.weight\": data_offsets [0, 96] hold 96 bytes but F32[4,8] needs "
                  "128"},
        Malformed{"NumelOverflow",
                  stFile(obj({entry("a", R"("F32")", "[4294967296,4294967296]", "[0,0]")})),
                  "tensor \"a\": F32[4294967296,4294967296] is larger than 2^63-1 bytes"},
        Malformed{"BytesOverInt64",
                  stFile(obj({entry("a", R"("F64")", "[1152921504606846976]", "[0,0]")})),
                  "tensor \"a\": F64[1152921504606846976] is larger than 2^63-1 bytes"},
        Malformed{"Overlap", stFile(obj({kA4, entry("b", R"("F32")", "[4]", "[8,24]")}), 24),
                  "tensor \"b\": data_offsets [8, 24] overlap the previous tensor \"a\" (ends at "
                  "16)"},
        Malformed{"HoleBetweenTensors",
                  stFile(obj({kA4, entry("b", R"("F32")", "[1]", "[20,24]")}), 24),
                  "tensor \"b\": data_offsets [20, 24] leave 4 bytes unused after the previous "
                  "tensor \"a\" (ends at 16)"},
        Malformed{"HoleAtStart", stFile(obj({entry("a", R"("F32")", "[1]", "[4,8]")}), 8),
                  "tensor \"a\": data_offsets [4, 8] leave 4 bytes unused at the start of the "
                  "data buffer"},
        // Header is 55 bytes, so the data starts at 63 and the stray bytes at 63 + 16.
        Malformed{"TrailingBytes", stFile(obj({kA4}), 28),
                  "byte 79: 12 bytes of data after the last tensor"},
        Malformed{"TrailingBytesNoTensors", stFile("{}", 3),
                  "byte 10: 3 bytes of data after a header with no tensors"},
        Malformed{"DuplicateTensor", stFile(obj({kA4, kA4}), 16),
                  "tensor \"a\" appears twice in the header"},
        Malformed{
            "DuplicateField",
            stFile(R"({"a":{"dtype":"F32","shape":[4],"dtype":"I32","data_offsets":[0,16]}})", 16),
            "tensor \"a\": key \"dtype\" appears twice"},
        Malformed{"MetadataNotObject", stFile(R"({"__metadata__":["pt"]})"),
                  "\"__metadata__\" must be an object mapping strings to strings, got [\"pt\"]"},
        Malformed{"MetadataNotStrings", stFile(R"({"__metadata__":{"format":"pt","epoch":3}})"),
                  "\"__metadata__\" must map strings to strings, but \"epoch\" holds 3"},
        // The first problem in the header wins over later ones.
        Malformed{"FirstProblemWins",
                  stFile(obj({entry("a", R"("F33")", "[4]", "[0,16]"),
                              entry("b", R"("F32")", "[-1]", "[0,16]")}),
                         16),
                  "tensor \"a\": unknown dtype \"F33\" (kiln reads F64, F32, F16, BF16, I64, "
                  "I32, I16, I8, U8, BOOL)"}),
    [](const testing::TestParamInfo<Malformed> &info) { return std::string(info.param.name); });

// A fresh directory per test, removed afterwards.
class SafetensorsFiles : public testing_files::TempDirTest {
protected:
  void SetUp() override {
    TempDirTest::SetUp();
    path_ = (dir_ / "ckpt.safetensors").string();
  }
  std::string path_;
};

TEST_F(SafetensorsFiles, WriteThenReadRoundTrips) {
  const SafetensorsFile original = everyDtype();
  ASSERT_TRUE(writeSafetensors(path_, original).ok());
  EXPECT_EQ(listDir(), std::vector<std::string>{"ckpt.safetensors"});
  EXPECT_EQ(readBytes(path_), serializeSafetensors(original));
  Expected<SafetensorsFile> loaded = readSafetensors(path_);
  ASSERT_TRUE(loaded) << loaded.error().message;
  expectSameTensors(original, *loaded);
  EXPECT_EQ(loaded->metadata, original.metadata);
}

// Reading only some tensors (a counter of a large checkpoint, an inference program's parameters):
// those, the metadata, the other tensors' names, and a header checked whole.
TEST_F(SafetensorsFiles, ReadsOnlyTheTensorsAskedFor) {
  const SafetensorsFile original = everyDtype();
  ASSERT_TRUE(writeSafetensors(path_, original).ok());
  const std::string name = original.tensors.back().name;
  Expected<SafetensorsFile> some = readSafetensors(path_, std::vector<std::string>{name, "none"});
  ASSERT_TRUE(some) << some.error().message;
  ASSERT_EQ(some->tensors.size(), 1u);
  EXPECT_EQ(some->tensors[0], *original.find(name));
  EXPECT_EQ(some->metadata, original.metadata);
  Expected<SafetensorsFile> none = readSafetensors(path_, std::vector<std::string>{});
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_TRUE(none->tensors.empty());
  Expected<SafetensorsFile> all = readSafetensors(path_);
  ASSERT_TRUE(all) << all.error().message;
  EXPECT_TRUE(all->unread.empty());
  std::vector<std::string> names;
  for (const SafetensorsTensor &t : all->tensors)
    names.push_back(t.name);
  EXPECT_EQ(none->unread, names);
  names.erase(std::find(names.begin(), names.end(), name));
  EXPECT_EQ(some->unread, names);
}

TEST_F(SafetensorsFiles, ReadErrorsNameThePath) {
  writeBytes(path_, stFile(obj({entry("wte.weight", R"("F32")", "[4,8]", "[0,96]")}), 96));
  Expected<SafetensorsFile> bad = readSafetensors(path_);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, path_ + ": tensor \"wte.weight\": data_offsets [0, 96] hold 96 "
                                         "bytes but F32[4,8] needs 128");

  writeBytes(path_, {1, 2, 3, 4, 5});
  bad = readSafetensors(path_);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            path_ + ": byte 0: file is 5 bytes, too short for the 8-byte header length");

  writeBytes(path_, cat({u64(100), bytesOf("{}")}));
  bad = readSafetensors(path_);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, path_ + ": byte 0: header length 100 runs past the end of the "
                                         "file (2 bytes follow the length)");

  const std::string missing = (dir_ / "missing.safetensors").string();
  bad = readSafetensors(missing);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, missing + ": cannot open: No such file or directory");

  bad = readSafetensors(dir_.string());
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            dir_.string() +
                ": not a regular file (a checkpoint is read whole, with its size known)");

  // A FIFO with no writer is refused at once; opening it for reading used to wait forever.
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  bad = readSafetensors(fifo);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            fifo + ": not a regular file (a checkpoint is read whole, with its size known)");
}

// A save that fails while writing the temporary file: at that moment the old checkpoint is still
// in place, and the partial temporary file has no name (O_TMPFILE: tests/runtime/
// output_file_test.cc); afterwards only the old checkpoint remains.
TEST_F(SafetensorsFiles, InterruptedSaveKeepsTheOldFile) {
  SafetensorsFile old;
  old.tensors = {tensor("w", D::F32, {2}, le<float>({1, 2}))};
  ASSERT_TRUE(writeSafetensors(path_, old).ok());
  const std::vector<uint8_t> oldBytes = readBytes(path_);

  const SafetensorsFile next = everyDtype();
  WriteOptions options;
  options.chunkBytes = 8;
  bool interrupted = false;
  options.beforeStep = [&](SaveStep step, uint64_t written) -> Status {
    EXPECT_EQ(step, SaveStep::WriteChunk);
    if (written < 40)
      return {};
    interrupted = true;
    EXPECT_EQ(listDir(), std::vector<std::string>{"ckpt.safetensors"});
    EXPECT_EQ(readBytes(path_), oldBytes);
    return makeError("disk full after {} bytes", written);
  };
  Status s = writeSafetensors(path_, next, options);
  ASSERT_FALSE(s);
  EXPECT_TRUE(interrupted);
  EXPECT_EQ(s.error().message,
            path_ + ": cannot write the temporary file: disk full after 40 bytes");
  EXPECT_EQ(readBytes(path_), oldBytes);
  EXPECT_EQ(listDir(), std::vector<std::string>{"ckpt.safetensors"});
}

// A failure at each later step: before the rename the old file survives; after it, the new one
// is in place and the error says so. A failed rename keeps what was written, and names it (a
// run's checkpoint is not lost with it).
TEST_F(SafetensorsFiles, FailureAtEachStepLeavesOneCompleteFile) {
  SafetensorsFile old;
  old.tensors = {tensor("w", D::F32, {2}, le<float>({1, 2}))};
  const SafetensorsFile next = everyDtype();
  const std::pair<SaveStep, std::string> steps[] = {
      {SaveStep::SyncFile, "cannot fsync the temporary file: injected"},
      {SaveStep::Rename, "cannot rename the temporary file over it: injected; what was written is "
                         "kept in " +
                             path_ + ".unsaved-"},
      {SaveStep::SyncDir, "saved, but cannot fsync directory \"" + dir_.string() + "\": injected"},
  };
  for (const auto &[failing, message] : steps) {
    ASSERT_TRUE(writeSafetensors(path_, old).ok());
    WriteOptions options;
    options.beforeStep = [failing = failing](SaveStep step, uint64_t) -> Status {
      return step == failing ? Status(makeError("injected")) : Status();
    };
    Status s = writeSafetensors(path_, next, options);
    ASSERT_FALSE(s);
    EXPECT_EQ(readBytes(path_), serializeSafetensors(failing == SaveStep::SyncDir ? next : old));
    if (failing == SaveStep::Rename) {
      const std::string &m = s.error().message, kept = m.substr(m.rfind(' ') + 1);
      EXPECT_EQ(m.substr(0, m.rfind(".unsaved-") + 9), path_ + ": " + message);
      EXPECT_EQ(readBytes(kept), serializeSafetensors(next));
      ASSERT_TRUE(writeSafetensors(path_, old).ok()); // (the next save leaves it alone)
      EXPECT_EQ(readBytes(kept), serializeSafetensors(next));
      fs::remove(kept);
    } else {
      EXPECT_EQ(s.error().message, path_ + ": " + message);
    }
    EXPECT_EQ(listDir(), std::vector<std::string>{"ckpt.safetensors"});
  }
}

TEST_F(SafetensorsFiles, SaveIntoMissingDirectoryFails) {
  const fs::path missing = dir_ / "no" / "such";
  const std::string path = (missing / "ckpt.safetensors").string();
  Status s = writeSafetensors(path, everyDtype());
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, path + ": cannot create a temporary file in \"" + missing.string() +
                                   "\": No such file or directory");
  EXPECT_TRUE(listDir().empty());
}

TEST_F(SafetensorsFiles, InvalidTensorsAreNotSaved) {
  const std::pair<SafetensorsTensor, std::string> bad[] = {
      {tensor("w", D::F32, {2, 3}, le<float>({1, 2})),
       "tensor \"w\": F32[2,3] needs 24 bytes but the tensor holds 8"},
      {tensor("w", D::F32, {-1}, {}), "tensor \"w\": shape[0] is -1"},
      {tensor("__metadata__", D::U8, {}, {0}),
       "tensor \"__metadata__\": the name is reserved for the header's metadata"},
      {tensor("w\xff", D::U8, {}, {0}), "tensor \"w\xef\xbf\xbd\": the name is not valid UTF-8"},
  };
  for (const auto &[t, message] : bad) {
    SafetensorsFile f;
    f.tensors = {t};
    Status s = writeSafetensors(path_, f);
    ASSERT_FALSE(s) << message;
    EXPECT_EQ(s.error().message, path_ + ": " + message);
  }
  SafetensorsFile twice;
  twice.tensors = {tensor("w", D::U8, {}, {0}), tensor("w", D::U8, {}, {1})};
  EXPECT_EQ(checkSafetensors(twice).error().message, "tensor \"w\": two tensors have this name");
  EXPECT_TRUE(listDir().empty());
}

TEST_F(SafetensorsFiles, ReplacingKeepsPermissionBits) {
  ASSERT_TRUE(writeSafetensors(path_, {}).ok());
  fs::permissions(path_, fs::perms::owner_read | fs::perms::owner_write);
  ASSERT_TRUE(writeSafetensors(path_, everyDtype()).ok());
  EXPECT_EQ(fs::status(path_).permissions(), fs::perms::owner_read | fs::perms::owner_write);
  Expected<SafetensorsFile> loaded = readSafetensors(path_);
  ASSERT_TRUE(loaded) << loaded.error().message;
  EXPECT_EQ(loaded->tensors.size(), everyDtype().tensors.size());
}

} // namespace
} // namespace kiln::runtime::safetensors_test
