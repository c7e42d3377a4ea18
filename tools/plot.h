// Charts drawn with cairo, as PNG or SVG (by the file's extension) with real text: the loss
// curves of `kiln train --plot` -- lines against a step axis, a second axis of tokens along the
// top, ticks at round numbers, a legend.
#pragma once

#include <string>
#include <vector>

#include "support/status.h"

namespace kiln::tools {

struct Series {
  std::string name;
  std::vector<double> x, y;
  bool markers = false; // a dot at each point (sparse series: validation losses)
};

struct Chart {
  std::string title, xLabel, yLabel;
  std::string topLabel; // the second x axis along the top ("" for none)
  double topPerX = 0;   // its value per unit of x (tokens per step)
  std::vector<Series> series;
};

// Writes `chart` to `path` (.png or .svg; runtime::writeOutputFile: a regular file atomically).
// Errors: another extension, a chart without points, the file.
Status drawChart(const Chart &chart, const std::string &path, int width = 900, int height = 540);

} // namespace kiln::tools
