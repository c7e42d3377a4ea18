// Reads the IR text form written by ir/printer.h back into a Graph, for `kiln verify`/`kiln opt`
// and golden tests. Diagnostics are "LINE:COL: message" (1-based; the caller prefixes the file)
// and say what was expected and what was found.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "support/status.h"

namespace kiln::ir {

struct ParseResult {
  std::optional<Graph> graph; // set iff `errors` is empty
  std::vector<Error> errors;  // in text order
};

// Parsing stops at the first syntax error. Problems that leave the syntax intact (unknown op or
// attribute, undefined or twice-defined value, operand count, ...) are collected and parsing goes
// on; when the syntax is fine, the statements without such problems are verified (ir::verify) and
// every semantic problem (a declared type the operands do not give, ...) is reported at its
// node's line:col. So one run reports every problem. Value names in the text may be any
// %[A-Za-z0-9_.]+; the graph numbers its values itself.
ParseResult parseGraph(std::string_view text);

} // namespace kiln::ir
