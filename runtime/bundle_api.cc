// The C API of runtime/bundle.h for applications that embed a compiled bundle: a kiln_model is
// the bundle's Executor (runtime/bundle_loader.h) with its weights loaded.
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/bundle.h"
#include "runtime/bundle_loader.h"
#include "runtime/checkpoint.h"
#include "runtime/kernels/bf16_instructions.h"
#include "runtime/model_description.h"
#include "runtime/thread_pool.h"
#include "runtime/weights.h"
#include "support/element.h"

struct kiln_model {
  std::unique_ptr<kiln::runtime::Executor> exe;
};

namespace {

void report(const std::string &message, char *error, size_t size) {
  if (error && size > 0)
    std::snprintf(error, size, "%s", message.c_str());
}

kiln_model *openModel(const kiln_bundle *bundle, int threads, const char *weights, char *error,
                      size_t error_size) {
  using namespace kiln::runtime;
  if (!bundle) {
    report("kiln_model_open: no bundle", error, error_size);
    return nullptr;
  }
  if (threads < 0) {
    report("kiln_model_open: threads is " + std::to_string(threads) +
               "; expected 0 (KILN_THREADS, or every core) or a count",
           error, error_size);
    return nullptr;
  }
  // threads 0 defers to KILN_THREADS, read once here: a bad value is reported (as kiln and
  // compiled executables report it at their start), not silently replaced by every core.
  int count = threads;
  if (count == 0) {
    kiln::Expected<std::optional<int>> v = ThreadPool::threadsVariable();
    if (!v) {
      report("kiln_model_open: " + v.error().message, error, error_size);
      return nullptr;
    }
    count = v->value_or(ThreadPool::hardwareThreads());
  }
  if (kiln::Status s = kiln::kernels::useBf16InstructionsVariable(); !s) {
    report("kiln_model_open: " + s.error().message, error, error_size);
    return nullptr;
  }
  kiln::Expected<std::unique_ptr<Executor>> exe = loadBundle(*bundle, count);
  if (!exe) {
    report(exe.error().message, error, error_size);
    return nullptr;
  }
  // Its collectives would fail at the first run: this process is one rank, with no others.
  if (const int64_t ranks = (*exe)->program().ranks; ranks > 1) {
    report(fmt::format("kiln_model_open: bundle {} is a training step of {} data-parallel ranks "
                       "(kiln compile --ranks {}), which its executable runs under mpirun; the "
                       "C API runs one process: compile it without --ranks",
                       bundle->name, ranks, ranks),
           error, error_size);
    return nullptr;
  }
  if (kiln::Status st = initWeights(**exe, 0); !st) {
    report(st.error().message, error, error_size);
    return nullptr;
  }
  if (weights) {
    if (kiln::Status fits = checkCheckpointFits(*bundle, weights, "this bundle"); !fits) {
      report(fits.error().message, error, error_size);
      return nullptr;
    }
    if (kiln::Expected<int> n = loadCheckpoint(**exe, weights); !n) {
      report(n.error().message, error, error_size);
      return nullptr;
    }
  }
  return new kiln_model{std::move(*exe)};
}

} // namespace

// Nothing escapes into a C caller: an allocation that fails is an error like any other.
extern "C" kiln_model *kiln_model_open(const kiln_bundle *bundle, int threads, const char *weights,
                                       char *error, size_t error_size) {
  try {
    return openModel(bundle, threads, weights, error, error_size);
  } catch (const std::exception &e) {
    report(e.what(), error, error_size);
    return nullptr;
  }
}

extern "C" void *kiln_model_tensor(kiln_model *model, const char *name, int64_t *elements) {
  if (!model || !name)
    return nullptr;
  const kiln::runtime::Program &p = model->exe->program();
  const kiln::runtime::Symbol *s = p.output(name);
  if (!s)
    s = p.argument(name);
  if (!s)
    return nullptr;
  if (elements)
    *elements = s->numElements();
  return model->exe->data(*s);
}

namespace {
// Error where an integer input with a stated range (a token input: the vocabulary) holds a value
// outside it, named with its input, element and value: the kernels only say that "an index is
// out of range" (kernel_abi.h's status carries no more).
kiln::Status checkInputRanges(kiln::runtime::Executor &exe) {
  using kiln::runtime::Symbol;
  for (const Symbol &s : exe.program().symbols) {
    if (s.kind != Symbol::Kind::Input || s.range <= 0 || !kiln::isInteger(s.dtype))
      continue;
    const auto *bytes = static_cast<const uint8_t *>(exe.data(s));
    const int64_t width = kiln::dtypeBytes(s.dtype);
    for (int64_t k = 0; k < s.numElements(); ++k)
      if (const int64_t v = kiln::element::getInt(s.dtype, bytes + k * width);
          v < 0 || v >= s.range)
        return kiln::makeError("kiln_model_run: input \"{}\" holds {} at element {} of [{}], "
                               "outside [0, {})",
                               s.name, v, k, fmt::join(s.shape, ","), s.range);
  }
  return {};
}
} // namespace

extern "C" int kiln_model_run(kiln_model *model, char *error, size_t error_size) {
  if (!model) {
    report("kiln_model_run: no model", error, error_size);
    return 0;
  }
  try {
    if (kiln::Status st = checkInputRanges(*model->exe); !st) {
      report(st.error().message, error, error_size);
      return 0;
    }
    if (kiln::Status st = model->exe->run(); !st) {
      report(st.error().message, error, error_size);
      return 0;
    }
  } catch (const std::exception &e) {
    report(e.what(), error, error_size);
    return 0;
  }
  return 1;
}

extern "C" void kiln_model_close(kiln_model *model) {
  delete model;
}
