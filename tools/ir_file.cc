// IR files where a command takes a model (see ir_file.h).
#include "tools/ir_file.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "codegen/backends.h"
#include "ir/parser.h"
#include "tools/cli_util.h"

namespace kiln::tools {

bool isIrFile(const std::string &model, bool irFlag) {
  return irFlag || model.ends_with(".kir") || model == "-"; // ("-": standard input)
}

std::string shownIrFile(const std::string &path) {
  return path == "-" ? "<stdin>" : path;
}

namespace {

// Where `message` starts with a place in an IR file ("LINE:COL: what": a parser's message, a
// node's location), the length of "LINE:COL"; else 0 (a message about the graph as a whole).
size_t irPlaceLength(std::string_view message) {
  const size_t colon = message.find(':'), end = message.find(": ");
  auto digits = [](std::string_view d) {
    return !d.empty() &&
           std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return end != std::string_view::npos && colon < end && digits(message.substr(0, colon)) &&
                 digits(message.substr(colon + 1, end - colon - 1))
             ? end
             : 0;
}

} // namespace

ir::Graph loadIrFile(const std::string &path) {
  // An IR file on standard input is read once: a command that reads its model again (its pad id,
  // a probe) gets the same graph, not an empty second read. (Another input of "-", --data say,
  // still reads standard input itself, and finds it used.)
  static std::optional<std::string> standardInput;
  if (path == "-" && !standardInput)
    standardInput = readInputFile(path);
  const std::string text = path == "-" ? *standardInput : readInputFile(path);
  ir::ParseResult r = ir::parseGraph(text);
  if (!r.errors.empty()) {
    for (const Error &e : r.errors) {
      if (const size_t place = irPlaceLength(e.message))
        fmt::print(stderr, "{}:{}: error: {}\n", shownIrFile(path), e.message.substr(0, place),
                   e.message.substr(place + 2));
      else
        fmt::print(stderr, "{}: error: {}\n", shownIrFile(path), e.message);
    }
    throw ReportedError();
  }
  return std::move(*r.graph);
}

std::string atIrFile(const std::string &path, const std::string &message) {
  if (irPlaceLength(message))
    return fmt::format("{}:{}", shownIrFile(path), message);
  // A pipeline's step before the place ("differentiate: 85:3: autodiff: ..."): the place first,
  // in the FILE:LINE:COL form every other error of the file has.
  for (size_t at = message.find(": "); at != std::string::npos; at = message.find(": ", at + 2))
    if (const size_t place = irPlaceLength(std::string_view(message).substr(at + 2))) {
      const std::string_view rest = std::string_view(message).substr(at + 2);
      return fmt::format("{}:{}: {}: {}", shownIrFile(path), rest.substr(0, place),
                         message.substr(0, at), rest.substr(place + 2));
    }
  return message;
}

ir::Graph builtFrom(const std::string &model, bool irFlag, Expected<ir::Graph> built) {
  if (!built && isIrFile(model, irFlag)) {
    const std::string &what = built.error().message, placed = atIrFile(model, what);
    throw UserError(placed != what ? placed : fmt::format("{}: {}", shownIrFile(model), what));
  }
  return orThrow(std::move(built));
}

ir::Graph modelGraph(const std::string &model, bool irFlag,
                     const std::vector<models::Setting> &settings) {
  return isIrFile(model, irFlag) ? loadIrFile(model) : orThrow(models::buildModel(model, settings));
}

void refuseSetsForIr(const std::string &model, bool irFlag, const std::vector<std::string> &sets) {
  if (isIrFile(model, irFlag) && !sets.empty())
    throw UserError(fmt::format("--set {}: {} is an IR file, built already (edit the file, or "
                                "dump the model with the setting)",
                                sets.front(), model));
}

void refuseF64(const ir::Graph &g, std::string_view what) {
  if (const std::optional<std::string> where = codegen::f64Value(g))
    throw UserError(fmt::format("graph @{} holds f64 values ({}): {} runs the kernels, which "
                                "compute in f32 (f64 values compute in double only on kiln's "
                                "reference backend, at --precision f64)",
                                g.name(), *where, what));
}

void requireLoss(const ir::Graph &g, const std::string &model) {
  if (!g.findOutput(ir::OutputRole::Loss))
    throw UserError(fmt::format("{}: graph @{} has no loss output, which training needs (kiln "
                                "dump MODEL --set loss=true writes one: `output \"loss\" = %N "
                                "loss`)",
                                model, g.name()));
}

} // namespace kiln::tools
