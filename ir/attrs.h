// Typed op attributes. Each op declares its attributes (name, kind, default) in its record; a
// node stores one value per declared attribute, in declaration order, defaults filled in. So an
// attribute is never missing, never misspelt and never of the wrong kind once a node exists.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ir/types.h"
#include "support/status.h"

namespace kiln::ir {

enum class AttrKind : uint8_t { Int, Float, Bool, Ints, DType, Graph };
std::string_view attrKindName(AttrKind k); // "int", "float", "bool", "ints", "dtype", "graph"

class Graph;
// A graph held by a node as an attribute: the body of a region op (ir/ops/region.h). Immutable
// and shared, so copying a node or a whole graph does not copy bodies. Two regions are equal
// when their bodies print the same (what CSE needs: same computation, not same pointer).
struct Region {
  std::shared_ptr<const Graph> graph;
  bool operator==(const Region &o) const;
};

// The variant's alternatives are in AttrKind order: value.index() == AttrKind.
using AttrValue = std::variant<int64_t, double, bool, std::vector<int64_t>, DType, Region>;
inline AttrKind kindOf(const AttrValue &v) {
  return static_cast<AttrKind>(v.index());
}

// One declared attribute. `required` attributes have no default; otherwise the default is
// `defNumber` (Int, Float, Bool), `defDType` (DType) or the empty list (Ints).
struct AttrSpec {
  std::string_view name;
  AttrKind kind;
  bool required = false;
  double defNumber = 0;
  DType defDType = DType::F32;
};

AttrValue defaultValue(const AttrSpec &spec);

// Attribute values of one node, aligned with its op's AttrSpecs.
class Attrs {
public:
  Attrs() = default;
  explicit Attrs(std::span<const AttrSpec> spec); // all defaults (required ones zero-valued)

  std::span<const AttrSpec> spec() const { return spec_; }
  const std::vector<AttrValue> &values() const { return values_; }

  // Sets `name`; an error names the attribute and the expected kind. An Int value is accepted
  // for a Float attribute (written `scale = 1` it means 1.0).
  Status set(std::string_view name, AttrValue value);

  int64_t getInt(std::string_view name) const { return std::get<int64_t>(at(name)); }
  double getFloat(std::string_view name) const { return std::get<double>(at(name)); }
  bool getBool(std::string_view name) const { return std::get<bool>(at(name)); }
  const std::vector<int64_t> &getInts(std::string_view name) const {
    return std::get<std::vector<int64_t>>(at(name));
  }
  DType getDType(std::string_view name) const { return std::get<DType>(at(name)); }

  int indexOf(std::string_view name) const; // -1 if the op declares no such attribute
  bool isDefault(int index) const { return values_[index] == defaultValue(spec_[index]); }
  bool operator==(const Attrs &o) const { return values_ == o.values_; }

private:
  const AttrValue &at(std::string_view name) const;
  std::span<const AttrSpec> spec_;
  std::vector<AttrValue> values_;
};

// Text form of a value as the IR printer writes it: 3, 0.125, -inf, true, [0,2,1], f32, and a
// region's body as a nested `graph @name {...}` (unindented; the printer indents it).
// Floats use the shortest form that reads back to the same double.
std::string attrValueString(const AttrValue &v);

// Initializer for building nodes: {{"axis", int64_t{1}}, {"keepdims", true}}.
using AttrInit = std::pair<std::string_view, AttrValue>;

} // namespace kiln::ir
