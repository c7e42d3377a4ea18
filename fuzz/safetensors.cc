// Fuzz target: safetensors checkpoints (kiln --load, the standalone executables' --weights). The
// reader returns a file or an error naming the problem, never crashes or over-allocates; a file it
// accepts and that may be saved serializes to bytes that read back to the same file.
#include <vector>

#include "fuzz/fuzz.h"
#include "runtime/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace kiln::runtime;
  kiln::Expected<SafetensorsFile> f = parseSafetensors({data, size});
  if (!f || !checkSafetensors(*f))
    return 0;
  const std::vector<uint8_t> bytes = serializeSafetensors(*f);
  kiln::Expected<SafetensorsFile> again = parseSafetensors(bytes);
  if (!again)
    kiln::fuzz::fail("a serialized file does not read back: " + again.error().message, "");
  if (serializeSafetensors(*again) != bytes)
    kiln::fuzz::fail("serialize(parse(serialize(f))) differs from serialize(f)", "");
  return 0;
}
