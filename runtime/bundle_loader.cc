// Bundles as executables (see bundle_loader.h).
#include "runtime/bundle_loader.h"

#include <cstring>

#include "support/checked.h"

namespace kiln::runtime {

Expected<Program> programOf(const kiln_bundle &b) {
  if (b.version != KILN_BUNDLE_VERSION)
    return makeError("bundle: version {}, but this runtime reads version {}", b.version,
                     KILN_BUNDLE_VERSION);
  if (!b.name || (b.symbol_count > 0 && !b.symbols) || !b.run || b.symbol_count < 0 ||
      b.step_count < 0 || (b.step_count > 0 && !b.step_kinds) ||
      (b.region_bytes[static_cast<int>(MemRegion::Constants)] > 0 && !b.constants))
    return makeError("bundle: a name, symbols, step kinds, constants or entry point is missing");
  Program p;
  p.name = b.name;
  if (b.ranks < 1)
    return makeError("bundle {}: ranks {}; expected at least 1", p.name, b.ranks);
  p.ranks = b.ranks;
  for (int r = 0; r < KILN_REGIONS; ++r) {
    if (b.region_bytes[r] < 0)
      return makeError("bundle {}: region {} has {} bytes", p.name, r, b.region_bytes[r]);
    p.regionBytes[r] = b.region_bytes[r];
  }
  for (int64_t i = 0; i < b.symbol_count; ++i) {
    const kiln_symbol &k = b.symbols[i];
    const std::string name = k.name ? k.name : "";
    auto bad = [&](std::string_view field, int64_t v) {
      return makeError("bundle {}: symbol {} ('{}') has {} {}", p.name, i, name, field, v);
    };
    if (k.kind < 0 || k.kind > 3)
      return bad("kind", k.kind);
    if (k.role < 0 || k.role > 3)
      return bad("role", k.role);
    if (k.dtype < 0 || k.dtype >= static_cast<int64_t>(std::size(kAllDTypes)))
      return bad("dtype", k.dtype);
    if (k.rank < 0 || k.rank > KILN_MAX_RANK)
      return bad("rank", k.rank);
    if (k.region < 0 || k.region >= KILN_REGIONS)
      return bad("region", k.region);
    if (k.init_kind < 0 || k.init_kind > 4)
      return bad("init kind", k.init_kind);
    if (k.domain < 0 || k.domain > 2)
      return bad("domain", k.domain);
    if (k.of < -1 || k.of >= b.symbol_count)
      return bad("argument index", k.of);
    Symbol s;
    s.name = name;
    s.kind = static_cast<Symbol::Kind>(k.kind);
    s.role = static_cast<Symbol::Role>(k.role);
    s.of = static_cast<int32_t>(k.of);
    s.dtype = static_cast<DType>(k.dtype);
    s.shape.assign(k.shape, k.shape + k.rank);
    s.region = static_cast<MemRegion>(k.region);
    s.offset = k.offset, s.bytes = k.bytes;
    s.init = {static_cast<ParamInit::Kind>(k.init_kind), k.init_scale};
    s.domain = static_cast<Domain>(k.domain);
    s.range = k.range;
    for (int64_t d : s.shape)
      if (d < 0)
        return bad("a dimension", d);
    if (s.numElements() < 0 || s.bytes != mulSat(s.numElements(), dtypeBytes(s.dtype)))
      return bad("bytes", s.bytes);
    if (s.offset < 0 || s.offset > p.regionBytes[k.region] - s.bytes)
      return bad("offset", s.offset);
    p.symbols.push_back(std::move(s));
  }
  if (Status s = p.checkBf16Copies(); !s)
    return makeError("bundle {}", s.error().message);
  return p;
}

Expected<std::unique_ptr<Executor>> loadBundle(const kiln_bundle &b, int threads,
                                               std::shared_ptr<const void> owner) {
  Expected<Program> program = programOf(b);
  if (!program)
    return program.error();
  ExecutorProgram p;
  p.program = std::move(*program);
  const int64_t constants = b.region_bytes[static_cast<int>(MemRegion::Constants)];
  Step load;
  load.kind = "constants";
  // The descriptor's pointers are into the bundle's own data (the program's, or the owner's).
  load.run = [b, constants](const StepContext &ctx) {
    if (constants > 0)
      std::memcpy(ctx.at<uint8_t>(MemRegion::Constants, 0), b.constants,
                  static_cast<size_t>(constants));
    return Status{};
  };
  p.atLoad.push_back(std::move(load));
  Step run;
  run.kind = "program";
  run.run = [b, owner = std::move(owner)](const StepContext &ctx) -> Status {
    const kiln_run r{ctx.base.data(), ctx.pool, ctx.comm};
    int64_t failed = -1;
    if (int32_t status = b.run(&r, &failed); status != KILN_OK) {
      const char *kind = failed >= 0 && failed < b.step_count ? b.step_kinds[failed] : "?";
      return makeError("{}: step {} ({}): {}", b.name, failed, kind, kiln_status_message(status));
    }
    return Status{};
  };
  p.steps.push_back(std::move(run));
  return Executor::create(std::move(p), "bundle", threads);
}

} // namespace kiln::runtime
