// IR files where a command takes a model: `kiln train FILE.kir`, `kiln compile -`, ... The file
// is the model (no --set), read once, and its errors are said of it, FILE:LINE:COL.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "models/zoo.h"
#include "support/status.h"

namespace kiln::tools {

// Whether MODEL names an IR file rather than a model of the table: `--ir` is given, or the name
// ends in ".kir", or it is "-" (standard input).
bool isIrFile(const std::string &model, bool irFlag);
// Parses and verifies an IR file ("-" = stdin); every problem is printed as
// PATH:LINE:COL: error: MESSAGE, then ReportedError is thrown.
ir::Graph loadIrFile(const std::string &path);
// The name the IR file `path` goes by in messages ("<stdin>" for "-").
std::string shownIrFile(const std::string &path);
// A message about the program of the IR file `path` (a step that failed, naming its node's
// LINE:COL, maybe after the pipeline step's name): said of the file, "PATH:LINE:COL: what";
// another message as it is.
std::string atIrFile(const std::string &path, const std::string &message);
// The graph a pipeline made of the model (`built`), its error said of the IR file where the model
// is one: at its node's place (atIrFile), else "PATH: what" (a training step already, ...).
ir::Graph builtFrom(const std::string &model, bool irFlag, Expected<ir::Graph> built);
// The graph a command works on: the IR file's (isIrFile), or the model built with `settings`.
ir::Graph modelGraph(const std::string &model, bool irFlag,
                     const std::vector<models::Setting> &settings);
// An IR file is built already: --set has nothing to set (UserError if `sets` is not empty).
void refuseSetsForIr(const std::string &model, bool irFlag, const std::vector<std::string> &sets);
// Refuses a graph with f64 values for `what` ("a bundle"), which runs the kernels: they compute in
// f32, and f64 values compute in double only on the reference backend (codegen::f64Value).
void refuseF64(const ir::Graph &g, std::string_view what);
// Training needs the loss: UserError naming `model` unless `g` outputs one.
void requireLoss(const ir::Graph &g, const std::string &model);

} // namespace kiln::tools
