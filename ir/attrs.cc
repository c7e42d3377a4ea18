// Attribute storage, defaults and text form.
#include "ir/attrs.h"

#include <cassert>
#include <charconv>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/printer.h"

namespace kiln::ir {

std::string_view attrKindName(AttrKind k) {
  switch (k) {
  case AttrKind::Int:
    return "int";
  case AttrKind::Float:
    return "float";
  case AttrKind::Bool:
    return "bool";
  case AttrKind::Ints:
    return "ints";
  case AttrKind::DType:
    return "dtype";
  case AttrKind::Graph:
    return "graph";
  }
  return "?";
}

AttrValue defaultValue(const AttrSpec &spec) {
  switch (spec.kind) {
  case AttrKind::Int:
    return static_cast<int64_t>(spec.defNumber);
  case AttrKind::Float:
    return spec.defNumber;
  case AttrKind::Bool:
    return spec.defNumber != 0;
  case AttrKind::Ints:
    return std::vector<int64_t>{};
  case AttrKind::DType:
    return spec.defDType;
  case AttrKind::Graph:
    return Region{};
  }
  return int64_t{0};
}

Attrs::Attrs(std::span<const AttrSpec> spec) : spec_(spec) {
  values_.reserve(spec.size());
  for (const AttrSpec &s : spec)
    values_.push_back(defaultValue(s));
}

int Attrs::indexOf(std::string_view name) const {
  for (size_t i = 0; i < spec_.size(); ++i)
    if (spec_[i].name == name)
      return static_cast<int>(i);
  return -1;
}

const AttrValue &Attrs::at(std::string_view name) const {
  int i = indexOf(name);
  assert(i >= 0 && "op declares no such attribute");
  return values_[i];
}

Status Attrs::set(std::string_view name, AttrValue value) {
  int i = indexOf(name);
  if (i < 0) {
    std::vector<std::string_view> known;
    for (const AttrSpec &s : spec_)
      known.push_back(s.name);
    if (known.empty())
      return makeError("unknown attribute '{}': this op has no attributes", name);
    return makeError("unknown attribute '{}' (expected one of: {})", name, fmt::join(known, ", "));
  }
  AttrKind want = spec_[i].kind;
  if (want == AttrKind::Float && kindOf(value) == AttrKind::Int) {
    // A double holds every integer up to 2^53, and above that only some: 2^53 + 1 would silently
    // become 2^53 (an i64 constant's value is such an attribute).
    const int64_t n = std::get<int64_t>(value);
    const auto d = static_cast<double>(n);
    if (d >= 0x1p63 || static_cast<int64_t>(d) != n)
      return makeError("attribute '{}' holds a double, which cannot hold the integer {} exactly "
                       "(it holds every integer of magnitude up to 2^53 = 9007199254740992)",
                       name, n);
    value = d;
  }
  if (kindOf(value) != want)
    return makeError("attribute '{}' expects a value of kind {}, got {} ({})", name,
                     attrKindName(want), attrKindName(kindOf(value)), attrValueString(value));
  values_[i] = std::move(value);
  return {};
}

bool Region::operator==(const Region &o) const {
  if (!graph || !o.graph)
    return graph == o.graph;
  return graph == o.graph || print(*graph) == print(*o.graph);
}

static std::string floatString(double d) {
  if (std::isnan(d))
    return "nan";
  if (std::isinf(d))
    return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d); // shortest round-trip form
  std::string s(buf, r.ptr);
  // Keep floats recognisable as floats in the text: 1 -> 1.0 (but 1e-05 stays as it is).
  if (s.find_first_of(".en") == std::string::npos)
    s += ".0";
  return s;
}

std::string attrValueString(const AttrValue &v) {
  switch (kindOf(v)) {
  case AttrKind::Int:
    return std::to_string(std::get<int64_t>(v));
  case AttrKind::Float:
    return floatString(std::get<double>(v));
  case AttrKind::Bool:
    return std::get<bool>(v) ? "true" : "false";
  case AttrKind::Ints:
    return fmt::format("[{}]", fmt::join(std::get<std::vector<int64_t>>(v), ","));
  case AttrKind::DType:
    return std::string(dtypeName(std::get<DType>(v)));
  case AttrKind::Graph: {
    const Region &r = std::get<Region>(v);
    return r.graph ? print(*r.graph) : "<no body>";
  }
  }
  return "?";
}

} // namespace kiln::ir
