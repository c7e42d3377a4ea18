// A compiled bundle (runtime/bundle.h) as an Executable: its symbol table as a runtime::Program,
// and an Executor whose one step calls the bundle's entry point over regions it allocates (the
// constants region filled from the bundle's bytes once, at load). What a standalone executable
// and an application embedding a model run; the same as a JIT-compiled whole program.
#pragma once

#include <memory>

#include "runtime/bundle.h"
#include "runtime/executor.h"
#include "support/status.h"

namespace kiln::runtime {

// The program a bundle describes. Errors: another bundle version, a field out of its range, a
// tensor outside its region.
Expected<Program> programOf(const kiln_bundle &b);

// `owner` keeps the bundle's code and data alive (a JIT), if they are not the program's own.
// Errors: programOf's.
Expected<std::unique_ptr<Executor>> loadBundle(const kiln_bundle &b, int threads,
                                               std::shared_ptr<const void> owner = nullptr);

} // namespace kiln::runtime
