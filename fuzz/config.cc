// Fuzz target: model configuration (--set KEY=VALUE) and model building. The input's first line
// names a model of the zoo (anything else picks one by its first byte), each
// further line is one --set. Settings parse or are rejected with an error, and a model either
// builds into a graph that verifies or reports which key is wrong: never a crash.
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz.h"
#include "ir/printer.h"
#include "models/zoo.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace kiln;
  const std::string_view text = kiln::fuzz::text(data, size);
  std::vector<std::string_view> lines;
  for (size_t at = 0; at <= text.size();) {
    size_t end = text.find('\n', at);
    end = end == std::string_view::npos ? text.size() : end;
    lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  const std::span<const models::ModelEntry> zoo = models::allModels();
  std::string_view model = lines.front();
  if (!models::findModel(model))
    model = zoo[(size ? data[0] : 0) % zoo.size()].name;
  std::vector<models::Setting> settings;
  for (size_t k = 1; k < lines.size(); ++k) {
    Expected<models::Setting> s = models::parseSetting(lines[k]);
    if (!s)
      return 0;
    settings.push_back(*s);
  }
  if (!kiln::fuzz::smallEnough(settings))
    return 0;
  Expected<ir::Graph> g = models::buildModel(model, settings);
  if (!g)
    return 0;
  if (std::vector<Error> errors = ir::verify(*g); !errors.empty())
    kiln::fuzz::fail("a built model does not verify: " + errors.front().message, std::string(text));
  return 0;
}
