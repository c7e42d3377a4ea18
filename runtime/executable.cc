// The program description's lookups and the checked read/write of Executable (see executable.h).
#include "runtime/executable.h"

#include <cmath>
#include <cstring>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/bf16.h"
#include "support/checked.h"

namespace kiln::runtime {

std::string_view symbolKindName(Symbol::Kind k) {
  switch (k) {
  case Symbol::Kind::Input:
    return "input";
  case Symbol::Kind::Param:
    return "param";
  case Symbol::Kind::State:
    return "state";
  case Symbol::Kind::Output:
    return "output";
  }
  return "?";
}

int64_t Symbol::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n = mulSat(n, d);
  return n;
}

int64_t Program::totalBytes() const {
  int64_t total = 0;
  for (int64_t b : regionBytes)
    total = addSat(total, b);
  return total;
}

const Symbol *Program::argument(std::string_view name) const {
  for (const Symbol &s : symbols)
    if (s.isArgument() && s.name == name)
      return &s;
  return nullptr;
}

const Symbol *Program::output(std::string_view name) const {
  for (const Symbol &s : symbols)
    if (!s.isArgument() && s.name == name)
      return &s;
  return nullptr;
}

const Symbol *Program::loss() const {
  for (const Symbol &s : symbols)
    if (s.kind == Symbol::Kind::Output && s.role == Symbol::Role::Loss)
      return &s;
  return nullptr;
}

bool Program::trains() const {
  for (const Symbol &s : symbols)
    if (s.kind == Symbol::Kind::Output && s.role == Symbol::Role::Update)
      return true;
  return false;
}

const Symbol *Program::stepCounter() const {
  for (const Symbol &s : symbols)
    if (s.kind == Symbol::Kind::State && s.domain == Domain::Count)
      return &s;
  return nullptr;
}

const Symbol *Program::bf16CopyOf(const Symbol &param) const {
  if (param.kind != Symbol::Kind::Param)
    return nullptr;
  const Symbol *copy = argument(std::string(kBf16CopyPrefix) + param.name);
  return copy && copy->isBf16Copy() ? copy : nullptr;
}

Status Program::checkBf16Copies() const {
  for (const Symbol &s : symbols) {
    if (!s.isBf16Copy())
      continue;
    const std::string_view of = bf16CopySource(s.name);
    const Symbol *p = argument(of);
    if (!p || p->kind != Symbol::Kind::Param || p->dtype != DType::F32 || s.dtype != DType::BF16 ||
        s.shape != p->shape)
      return makeError("@{}: state \"{}\": a bf16 copy must be bf16 of the shape of the f32 "
                       "parameter \"{}\"",
                       name, s.name, of);
  }
  return {};
}

namespace {
// t (f32) rounded to bf16, to nearest even.
HostTensor roundedToBf16(const HostTensor &t) {
  HostTensor b(DType::BF16, t.shape());
  const uint8_t *from = t.raw().data();
  uint8_t *to = b.raw().data();
  for (int64_t k = 0; k < t.numElements(); ++k) { // typed, not HostTensor::get/set per element
    float x;
    std::memcpy(&x, from + 4 * k, 4);
    const uint16_t bits = toBf16Bits(x);
    std::memcpy(to + 2 * k, &bits, 2);
  }
  return b;
}

// The first element of f32 `t` that is finite but rounds to a bf16 infinity (beyond bf16's largest
// finite value, 3.3895e38, by half its last place or more), or -1.
int64_t firstBf16Overflow(const HostTensor &t) {
  const uint8_t *from = t.raw().data();
  for (int64_t k = 0; k < t.numElements(); ++k) {
    float x;
    std::memcpy(&x, from + 4 * k, 4);
    if (std::isfinite(x) && std::isinf(roundToBf16(x)))
      return k;
  }
  return -1;
}

// t (bf16) widened to f32, which is exact.
HostTensor widenedToF32(const HostTensor &t) {
  HostTensor f(DType::F32, t.shape());
  const uint8_t *from = t.raw().data();
  uint8_t *to = f.raw().data();
  for (int64_t k = 0; k < t.numElements(); ++k) {
    uint16_t bits;
    std::memcpy(&bits, from + 2 * k, 2);
    const uint32_t wide = static_cast<uint32_t>(bits) << 16;
    std::memcpy(to + 4 * k, &wide, 4);
  }
  return f;
}
} // namespace

Status Executable::write(const Symbol &s, const HostTensor &t) {
  if (!s.isArgument())
    return makeError("\"{}\" is an output of @{}, not an argument that can be written", s.name,
                     program().name);
  if (s.isBf16Copy())
    return makeError("\"{}\" of @{} is a parameter's bf16 copy: writing the parameter writes it",
                     s.name, program().name);
  // Inputs and state take their own dtype. A weight stored in bf16 takes an f32 tensor too,
  // rounded; an f32 parameter a bf16 tensor, widened (exact): any command takes the weights an
  // inference bundle of kiln compile --precision bf16 holds.
  const bool rounded = s.roundsF32() && t.dtype() == DType::F32;
  const bool widened = s.widensBf16() && t.dtype() == DType::BF16;
  if ((t.dtype() != s.dtype && !rounded && !widened) || t.shape() != s.shape)
    return makeError("\"{}\" is {}[{}], but the tensor given is {}[{}]", s.name, dtypeName(s.dtype),
                     fmt::join(s.shape, ","), dtypeName(t.dtype()), fmt::join(t.shape(), ","));
  std::optional<HostTensor> wide;
  if (widened)
    wide = widenedToF32(t);
  const HostTensor &value = wide ? *wide : t;
  // A value that bf16 cannot hold would reach the products as infinity (and a bundle's weights
  // file as one, which its loader refuses): refused by name, as a non-finite weight is.
  if (rounded || program().bf16CopyOf(s))
    if (const int64_t k = firstBf16Overflow(value); k >= 0)
      return makeError("parameter \"{}\": element {} = {} is beyond bf16's range (its largest "
                       "finite value is {}), in which this program reads it",
                       s.name, k, value.get(k), fromBf16Bits(0x7f7f));
  if (rounded) // (not `rounded ? roundedToBf16(value) : value`: that copies value, a prvalue)
    store(s, roundedToBf16(value));
  else
    store(s, value);
  storeCopy(s, value);
  return {};
}

void Executable::storeCopy(const Symbol &param, const HostTensor &t) {
  if (const Symbol *copy = program().bf16CopyOf(param)) // the step's products read it
    store(*copy, roundedToBf16(t));
}

HostTensor Executable::read(const Symbol &s) const {
  return load(s);
}

Status Executable::write(std::string_view name, const HostTensor &t) {
  const Symbol *s = program().argument(name);
  if (!s)
    return makeError("@{} has no input, parameter or state \"{}\"", program().name, name);
  return write(*s, t);
}

Expected<HostTensor> Executable::read(std::string_view name) const {
  const Symbol *s = program().output(name);
  if (!s)
    s = program().argument(name);
  if (!s)
    return makeError("@{} has no output or argument \"{}\"", program().name, name);
  return load(*s);
}

} // namespace kiln::runtime
