// Fresh weights and inputs (see weights.h).
#include "runtime/weights.h"

#include <algorithm>
#include <cmath>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime/thread_pool.h"
#include "support/rng.h"

namespace kiln::runtime {

uint64_t streamOf(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull; // FNV-1a of the name
  for (unsigned char c : name)
    h = (h ^ c) * 0x100000001b3ull;
  return rng::mix64(seed ^ h);
}

double initValue(const ParamInit &init, std::span<const int64_t> shape, uint64_t stream,
                 int64_t k) {
  switch (init.kind) {
  case ParamInit::Kind::Zeros:
    return 0;
  case ParamInit::Kind::Ones:
    return 1;
  case ParamInit::Kind::Normal:
    return init.scale * rng::normal(stream, k);
  case ParamInit::Kind::Uniform:
    return init.scale * (2 * rng::uniform(stream, k) - 1);
  case ParamInit::Kind::XavierUniform: {
    // Glorot & Bengio: U(-a, a), a = gain sqrt(6 / (fan_in + fan_out)) of a [.., out, in] weight.
    int64_t fanIn = shape.empty() ? 1 : shape.back();
    int64_t fanOut = shape.size() < 2 ? 1 : shape[shape.size() - 2];
    return init.scale * std::sqrt(6.0 / double(fanIn + fanOut)) * (2 * rng::uniform(stream, k) - 1);
  }
  }
  return 0;
}

double inputValue(DType t, int64_t range, uint64_t stream, int64_t k) {
  if (isFloat(t))
    return rng::normal(stream, k);
  uint64_t n = t == DType::Bool ? 2 : range > 0 ? static_cast<uint64_t>(range) : 16;
  return static_cast<double>(rng::bits(stream, k) % n);
}

namespace {
// A tensor of s's dtype and shape with element k = value(stream, k), stream from seed and name.
// Each element depends on k alone, so a large tensor is filled in parts on every core (the same
// values at any thread count): normal weights cost a log and a cosine each, seconds for a GPT-2.
template <class Fn> HostTensor generate(const Symbol &s, uint64_t seed, Fn value) {
  HostTensor t(s.dtype, s.shape);
  const uint64_t stream = streamOf(seed, s.name);
  const int64_t n = t.numElements();
  auto fill = [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k)
      t.set(k, value(stream, k));
  };
  constexpr int64_t kPerPart = int64_t{1} << 16;
  const int64_t parts = std::min<int64_t>(ThreadPool::defaultThreads(), n / kPerPart);
  if (parts < 2) {
    fill(0, n);
    return t;
  }
  std::vector<std::thread> threads;
  int64_t started = 1; // parts [0, started) run here or on a thread; the rest run here
  try {
    for (; started < parts; ++started)
      threads.emplace_back(fill, n * started / parts, n * (started + 1) / parts);
  } catch (const std::system_error &) { // no thread to be had: the rest of the parts here
  }
  fill(0, n / parts);
  fill(n * started / parts, n);
  for (std::thread &th : threads)
    th.join();
  return t;
}
} // namespace

HostTensor initialWeight(const Symbol &s, uint64_t seed) {
  return generate(
      s, seed, [&](uint64_t stream, int64_t k) { return initValue(s.init, s.shape, stream, k); });
}

HostTensor randomInput(const Symbol &s, uint64_t seed) {
  return generate(
      s, seed, [&](uint64_t stream, int64_t k) { return inputValue(s.dtype, s.range, stream, k); });
}

Status initWeights(Executable &exe, uint64_t seed) {
  for (const Symbol &s : exe.program().symbols)
    if (s.isWeight())
      if (Status st = exe.write(s, initialWeight(s, seed)); !st)
        return st;
  return {};
}

Status randomizeInputs(Executable &exe, uint64_t seed) {
  for (const Symbol &s : exe.program().symbols)
    if (s.kind == Symbol::Kind::Input)
      if (Status st = exe.write(s, randomInput(s, seed)); !st)
        return st;
  return {};
}

} // namespace kiln::runtime
