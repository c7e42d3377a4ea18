// Charts with cairo (see plot.h).
#include "tools/plot.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include <cairo-svg.h>
#include <cairo.h>
#include <fmt/format.h>

#include "runtime/output_file.h"

namespace kiln::tools {

namespace {

struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  void add(double v) {
    if (std::isfinite(v))
      lo = std::min(lo, v), hi = std::max(hi, v);
  }
  bool empty() const { return !(lo <= hi); }
};

} // namespace

std::vector<double> axisTicks(double lo, double hi, int count, double least) {
  const double raw = (hi - lo) / count, p = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = std::max(least, raw / p < 1.5   ? p
                                      : raw / p < 3.5 ? 2 * p
                                      : raw / p < 7.5 ? 5 * p
                                                      : 10 * p);
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step)
    out.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  return out;
}

namespace {

std::string label(double v) {
  const double a = std::abs(v);
  if (a >= 1e6)
    return fmt::format("{:g}M", v / 1e6);
  if (a >= 1e4)
    return fmt::format("{:g}k", v / 1e3);
  return fmt::format("{:g}", v);
}

// Selects the pictures' font on cr; the extents of `s` in it.
cairo_text_extents_t inFont(cairo_t *cr, const std::string &s, double size, bool bold) {
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  return e;
}

struct Painter {
  cairo_t *cr;
  void color(uint32_t rgb, double alpha = 1) {
    cairo_set_source_rgba(cr, (rgb >> 16 & 255) / 255.0, (rgb >> 8 & 255) / 255.0,
                          (rgb & 255) / 255.0, alpha);
  }
  void line(double x0, double y0, double x1, double y1) {
    cairo_move_to(cr, x0, y0);
    cairo_line_to(cr, x1, y1);
    cairo_stroke(cr);
  }
  // Text anchored at (x, y): ax, ay in {0, 0.5, 1} of its width and height.
  void text(const std::string &s, double x, double y, double ax, double ay, double size,
            bool bold = false, bool vertical = false) {
    const cairo_text_extents_t e = inFont(cr, s, size, bold);
    cairo_save(cr);
    cairo_translate(cr, x, y);
    if (vertical)
      cairo_rotate(cr, -M_PI / 2);
    cairo_move_to(cr, -e.x_bearing - ax * e.width, -e.y_bearing - ay * e.height);
    cairo_show_text(cr, s.c_str());
    cairo_restore(cr);
  }
};

// The width of `s` as Painter::text draws it (measured on a scratch surface, before the picture's
// size is chosen).
double textWidth(const std::string &s, double size, bool bold = false) {
  cairo_surface_t *surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 1);
  cairo_t *cr = cairo_create(surface);
  const cairo_text_extents_t e = inFont(cr, s, size, bold);
  cairo_destroy(cr);
  cairo_surface_destroy(surface);
  return e.x_advance;
}

// `s` cut by whole UTF-8 characters, with an ellipsis, to at most `most` px wide.
std::string fitted(std::string s, double size, double most) {
  if (textWidth(s, size) <= most)
    return s;
  while (!s.empty() && textWidth(s + "\u2026", size) > most) {
    unsigned char last = 0;
    do { // the last character: its continuation bytes (10xxxxxx), then its first
      last = static_cast<unsigned char>(s.back());
      s.pop_back();
    } while (!s.empty() && (last & 0xC0) == 0x80);
  }
  return s + "\u2026";
}

void draw(cairo_t *cr, const Chart &c, int width, int height, const Range &xr, const Range &yr) {
  Painter p{cr};
  const double left = 78, right = width - 24, top = c.topLabel.empty() ? 56 : 92,
               bottom = height - 62;
  auto X = [&](double x) { return left + (x - xr.lo) / (xr.hi - xr.lo) * (right - left); };
  auto Y = [&](double y) { return bottom - (y - yr.lo) / (yr.hi - yr.lo) * (bottom - top); };
  p.color(0xffffff);
  cairo_paint(cr);
  p.color(0x222222);
  p.text(c.title, width / 2.0, 14, 0.5, 0, 17, true);
  // Grid and ticks.
  cairo_set_line_width(cr, 1);
  const double leastX = c.wholeX ? 1 : 0;
  for (double t : axisTicks(xr.lo, xr.hi, 8, leastX)) {
    p.color(0xe6e6e6);
    p.line(X(t), top, X(t), bottom);
    p.color(0x444444);
    p.text(label(t), X(t), bottom + 8, 0.5, 0, 12);
  }
  for (double t : axisTicks(yr.lo, yr.hi, 6)) {
    p.color(0xe6e6e6);
    p.line(left, Y(t), right, Y(t));
    p.color(0x444444);
    p.text(label(t), left - 8, Y(t), 1, 0.5, 12);
  }
  if (!c.topLabel.empty() && c.topPerX > 0) {
    for (double t : axisTicks(xr.lo * c.topPerX, xr.hi * c.topPerX, 8, leastX)) {
      p.color(0x444444);
      p.line(X(t / c.topPerX), top, X(t / c.topPerX), top - 5);
      p.text(label(t), X(t / c.topPerX), top - 9, 0.5, 1, 12);
    }
    p.text(c.topLabel, (left + right) / 2, top - 30, 0.5, 1, 13);
  }
  p.color(0x444444);
  cairo_rectangle(cr, left, top, right - left, bottom - top);
  cairo_stroke(cr);
  p.text(c.xLabel, (left + right) / 2, height - 10, 0.5, 1, 13);
  p.text(c.yLabel, 18, (top + bottom) / 2, 0.5, 0.5, 13, false, true);
  // The series, clipped to the plot area.
  const uint32_t colors[] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728};
  cairo_save(cr);
  cairo_rectangle(cr, left, top, right - left, bottom - top);
  cairo_clip(cr);
  for (size_t k = 0; k < c.series.size(); ++k) {
    const Series &s = c.series[k];
    p.color(colors[k % 4]);
    cairo_set_line_width(cr, 2);
    bool pen = false;
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i])) {
        pen = false;
        continue;
      }
      (pen ? cairo_line_to : cairo_move_to)(cr, X(s.x[i]), Y(s.y[i]));
      pen = true;
    }
    cairo_stroke(cr);
    // Markers; and a point with no finite neighbour, which a line does not draw (a run of one
    // step's loss), as a dot.
    auto finite = [&](size_t i) { return i < s.x.size() && std::isfinite(s.y[i]); };
    for (size_t i = 0; i < s.x.size(); ++i)
      if (finite(i) && (s.markers || ((i == 0 || !finite(i - 1)) && !finite(i + 1)))) {
        cairo_arc(cr, X(s.x[i]), Y(s.y[i]), 3.5, 0, 2 * M_PI);
        cairo_fill(cr);
      }
  }
  cairo_restore(cr);
  // Legend, top right inside the plot.
  double y = top + 16;
  for (size_t k = 0; k < c.series.size(); ++k, y += 20) {
    p.color(colors[k % 4]);
    cairo_set_line_width(cr, 3);
    p.line(right - 150, y, right - 126, y);
    p.color(0x222222);
    p.text(c.series[k].name, right - 118, y, 0, 0.5, 12);
  }
}

cairo_status_t append(void *closure, const unsigned char *data, unsigned int length) {
  static_cast<std::string *>(closure)->append(reinterpret_cast<const char *>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

// Draws with `paint` on a width x height surface and writes it to `path` (.png or .svg).
Status render(const std::string &path, int width, int height,
              const std::function<void(cairo_t *)> &paint) {
  const bool png = path.ends_with(".png"), svg = path.ends_with(".svg");
  if (!png && !svg)
    return makeError("{}: a picture is written as .png or .svg", path);
  std::string bytes;
  cairo_surface_t *surface =
      png ? cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height)
          : cairo_svg_surface_create_for_stream(append, &bytes, width, height);
  cairo_t *cr = cairo_create(surface);
  paint(cr);
  cairo_status_t st = cairo_status(cr);
  cairo_destroy(cr);
  if (png && st == CAIRO_STATUS_SUCCESS)
    st = cairo_surface_write_to_png_stream(surface, append, &bytes);
  cairo_surface_finish(surface);
  if (st == CAIRO_STATUS_SUCCESS)
    st = cairo_surface_status(surface);
  cairo_surface_destroy(surface);
  if (st != CAIRO_STATUS_SUCCESS)
    return makeError("{}: cairo: {}", path, cairo_status_to_string(st));
  return runtime::writeOutputFile(path, bytes);
}

} // namespace

Status drawChart(const Chart &chart, const std::string &path, int width, int height) {
  if (!path.ends_with(".png") && !path.ends_with(".svg"))
    return makeError("{}: a picture is written as .png or .svg", path);
  Range xr, yr;
  for (const Series &s : chart.series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.y[i]))
        xr.add(s.x[i]), yr.add(s.y[i]);
  if (xr.empty())
    return makeError("{}: nothing to plot (no finite point)", path);
  if (xr.hi == xr.lo)
    xr.hi = xr.lo + 1;
  const double pad = yr.hi > yr.lo ? 0.05 * (yr.hi - yr.lo) : 0.5;
  yr.lo -= pad, yr.hi += pad;
  return render(path, width, height, [&](cairo_t *cr) { draw(cr, chart, width, height, xr, yr); });
}

Status drawHeatmaps(const Heatmaps &maps, const std::string &path) {
  const size_t n = maps.tokens.size();
  if (n == 0 || maps.panels.empty())
    return makeError("{}: nothing to draw (no tokens or no panel)", path);
  for (const std::vector<double> &panel : maps.panels)
    if (panel.size() != n * n)
      return makeError("{}: a panel has {} values, not {} x {}", path, panel.size(), n, n);
  // Cells of 8 to 22 px, a panel about 380 px wide; labels of 0 to 12 px beside them, as wide as
  // the widest token's (at most 160 px: longer ones are cut). The picture is as wide as its
  // title and the scale too (one short token's panel cut both off).
  const double cell = std::clamp(380.0 / static_cast<double>(n), 8.0, 22.0);
  const double side = cell * static_cast<double>(n), font = std::min(cell * 0.75, 12.0);
  constexpr double kMostLabel = 160;
  std::vector<std::string> labels;
  double labelW = font * 4;
  for (const std::string &t : maps.tokens) {
    labels.push_back(fitted(t, font, kMostLabel));
    labelW = std::max(labelW, textWidth(labels.back(), font));
  }
  const double margin = 14 + labelW, gap = 28, top = 56;
  const size_t cols = std::min<size_t>(maps.panels.size(), n > 24 ? 2 : 4);
  const size_t rows = (maps.panels.size() + cols - 1) / cols;
  const double panelW = margin + side + gap, panelH = 22 + margin + side + gap;
  const int width = static_cast<int>(std::max({gap + static_cast<double>(cols) * panelW,
                                               textWidth(maps.title, 17, true) + 2 * gap, 240.0}));
  const int height = static_cast<int>(top + static_cast<double>(rows) * panelH + 40);
  return render(path, width, height, [&](cairo_t *cr) {
    Painter p{cr};
    p.color(0xffffff);
    cairo_paint(cr);
    p.color(0x222222);
    p.text(maps.title, width / 2.0, 14, 0.5, 0, 17, true);
    for (size_t k = 0; k < maps.panels.size(); ++k) {
      const double x0 = gap + static_cast<double>(k % cols) * panelW + margin;
      const double y0 = top + static_cast<double>(k / cols) * panelH + 22 + margin;
      p.color(0x222222);
      if (k < maps.panelTitles.size())
        p.text(maps.panelTitles[k], x0 + side / 2, y0 - margin - 18, 0.5, 0, 13, true);
      // White (0) to dark blue (1), row i: query token i, column j: key token j.
      for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < n; ++j) {
          const double v = std::clamp(maps.panels[k][i * n + j], 0.0, 1.0);
          cairo_set_source_rgb(cr, 1 - v * 0.97, 1 - v * 0.81, 1 - v * 0.58);
          cairo_rectangle(cr, x0 + static_cast<double>(j) * cell,
                          y0 + static_cast<double>(i) * cell, cell, cell);
          cairo_fill(cr);
        }
      p.color(0x888888);
      cairo_set_line_width(cr, 1);
      cairo_rectangle(cr, x0, y0, side, side);
      cairo_stroke(cr);
      p.color(0x333333);
      for (size_t i = 0; i < n; ++i) {
        const double c = (static_cast<double>(i) + 0.5) * cell;
        p.text(labels[i], x0 - 5, y0 + c, 1, 0.5, font);              // queries, left
        p.text(labels[i], x0 + c, y0 - 5, 0, 0.5, font, false, true); // keys, on top
      }
    }
    // The scale: a gradient bar from 0 to 1.
    const double bx = width - 190.0, by = height - 26.0;
    cairo_pattern_t *ramp = cairo_pattern_create_linear(bx, 0, bx + 120, 0);
    cairo_pattern_add_color_stop_rgb(ramp, 0, 1, 1, 1);
    cairo_pattern_add_color_stop_rgb(ramp, 1, 0.03, 0.19, 0.42);
    cairo_set_source(cr, ramp);
    cairo_rectangle(cr, bx, by, 120, 10);
    cairo_fill(cr);
    cairo_pattern_destroy(ramp);
    p.color(0x444444);
    p.text("0", bx - 6, by + 5, 1, 0.5, 11);
    p.text("1", bx + 126, by + 5, 0, 0.5, 11);
    p.text("probability", bx + 60, by - 4, 0.5, 1, 11);
  });
}

} // namespace kiln::tools
