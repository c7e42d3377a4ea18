// The one interface every backend implements (the reference interpreter, the Highway executor,
// LLVM-generated code, a standalone executable): a compiled program with its memory allocated,
// whose named tensors can be written and read, and which runs -- a forward pass, or a whole
// training step that leaves the updated weights and optimizer state in place for the next one.
// The trainer, weight initialization and checkpoints (runtime/) work with any Executable.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/host_tensor.h"
#include "runtime/program.h"
#include "support/status.h"

namespace kiln::runtime {

class Communicator;

class Executable {
public:
  virtual ~Executable() = default;

  virtual const Program &program() const = 0;
  // "reference", "highway", ...
  virtual std::string_view backend() const = 0;

  // Runs the program once. Inputs, parameters and state are as last written; afterwards every
  // output can be read, and each argument with an update output holds its updated value.
  virtual Status run() = 0;

  // The bytes the backend holds for the program (its regions, and any overhead of its own).
  virtual int64_t memoryBytes() const = 0;

  // The ranks the program's collectives (all_reduce) run over, from the next run() on; null (the
  // default): this process alone. The Executable does not own it.
  void setCommunicator(Communicator *comm) { comm_ = comm; }
  Communicator *communicator() const { return comm_; }

  // An argument's or output's value. write() takes arguments only, of the symbol's shape and
  // dtype (an Error says which differs) -- or f32 for a weight stored in bf16 (rounded to nearest
  // even), bf16 for an f32 parameter (widened) -- and rewrites a parameter's bf16 copy; read()
  // takes any symbol.
  Status write(const Symbol &s, const HostTensor &t);
  HostTensor read(const Symbol &s) const;
  // The same by name: arguments for write, outputs (else arguments) for read.
  Status write(std::string_view name, const HostTensor &t);
  Expected<HostTensor> read(std::string_view name) const;

protected:
  // The backend's side of write/read, with the symbol and the tensor already checked to agree.
  virtual void store(const Symbol &s, const HostTensor &t) = 0;
  virtual HostTensor load(const Symbol &s) const = 0;
  // Writes parameter `param`'s bf16 copy, if it has one, from t, the parameter's value.
  void storeCopy(const Symbol &param, const HostTensor &t);

private:
  Communicator *comm_ = nullptr;
};

} // namespace kiln::runtime
