// Pictures drawn with cairo, as PNG or SVG (by the file's extension) with real text: the loss
// curves of `kiln train --plot` -- lines against a step axis, a second axis of tokens along the
// top, ticks at round numbers, a legend -- and the attention maps of `kiln attention`.
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
  // x and the top axis count things (steps, tokens): ticks at whole numbers only, so that a
  // run of a few steps is not labelled 31.1, 31.2, ...
  bool wholeX = false;
};

// Attention maps: a panel per head, each an n x n grid of probabilities in [0, 1] (row: the
// query token, column: the key token), the tokens written along both axes.
struct Heatmaps {
  std::string title;
  std::vector<std::string> tokens;         // n labels
  std::vector<std::string> panelTitles;    // one per panel
  std::vector<std::vector<double>> panels; // each n * n, row-major
};

// An axis's ticks: multiples of 1, 2 or 5 times a power of ten, about `count` of them over
// [lo, hi], at least `least` apart (1: whole numbers only).
std::vector<double> axisTicks(double lo, double hi, int count, double least = 0);

// Writes `chart` to `path` (.png or .svg; runtime::writeOutputFile: a regular file atomically).
// Errors: another extension, a chart without points, the file.
Status drawChart(const Chart &chart, const std::string &path, int width = 900, int height = 540);

// Writes `maps` to `path` (.png or .svg), sized to fit: Errors as drawChart's, and panels that
// are not n * n.
Status drawHeatmaps(const Heatmaps &maps, const std::string &path);

} // namespace kiln::tools
