// The loss chart's axes and what the pictures show (tools/plot.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <cairo.h>

#include "tests/util/temp_dir.h"
#include "tools/plot.h"

namespace kiln::tools::plot_test {
namespace {

TEST(Plot, TicksAtRoundNumbers) {
  EXPECT_EQ(axisTicks(0, 100, 5), (std::vector<double>{0, 20, 40, 60, 80, 100}));
  EXPECT_EQ(axisTicks(-1, 1, 4), (std::vector<double>{-1, -0.5, 0, 0.5, 1}));
}

// A resumed run of two steps (31 and 32) was labelled 31.1, 31.2, ... on its step axis.
TEST(Plot, WholeNumberTicksForCounts) {
  EXPECT_EQ(axisTicks(31, 32, 8, 1), (std::vector<double>{31, 32}));
  EXPECT_EQ(axisTicks(31, 37, 8, 1), (std::vector<double>{31, 32, 33, 34, 35, 36, 37}));
  EXPECT_EQ(axisTicks(0, 2000, 8, 1), axisTicks(0, 2000, 8)); // wide ranges unchanged
}

class PlotFiles : public testing_files::TempDirTest {
protected:
  // The PNG at `path`, read back (cairo's RGB24: 0x00RRGGBB a pixel).
  struct Picture {
    int width = 0, height = 0;
    std::vector<uint32_t> pixels;
    uint32_t at(int x, int y) const {
      return pixels[static_cast<size_t>(y * width + x)] & 0xffffff;
    }
  };
  static Picture read(const std::string &path) {
    cairo_surface_t *s = cairo_image_surface_create_from_png(path.c_str());
    Picture p;
    if (cairo_surface_status(s) == CAIRO_STATUS_SUCCESS) {
      p.width = cairo_image_surface_get_width(s), p.height = cairo_image_surface_get_height(s);
      const int stride = cairo_image_surface_get_stride(s);
      const unsigned char *data = cairo_image_surface_get_data(s);
      for (int y = 0; y < p.height; ++y)
        for (int x = 0; x < p.width; ++x)
          p.pixels.push_back(*reinterpret_cast<const uint32_t *>(data + y * stride + 4 * x));
    }
    cairo_surface_destroy(s);
    return p;
  }
};

// A map of one short token was as wide as its one panel: the title and the scale were cut off.
TEST_F(PlotFiles, HeatmapsAreAsWideAsTheirTitle) {
  const std::string path = (dir_ / "one.png").string();
  Heatmaps maps{.title = "kiln attention: attention of layer 0 (blocks.0.attn), head 0",
                .tokens = {"H"},
                .panelTitles = {"head 0"},
                .panels = {{1.0}}};
  ASSERT_TRUE(drawHeatmaps(maps, path).ok());
  const Picture p = read(path);
  EXPECT_GT(p.width, 400); // (the title: about 500 px at 17 px; the panel alone made 140)
}

// A series of one point (a run of one step) was drawn as nothing: a line needs two.
TEST_F(PlotFiles, ALonePointIsADot) {
  const std::string path = (dir_ / "loss.png").string();
  Chart chart;
  chart.series = {{"train", {1}, {5.5}}};
  ASSERT_TRUE(drawChart(chart, path, 400, 300).ok());
  const Picture p = read(path);
  ASSERT_EQ(p.width, 400);
  // x = 1 at the plot's left edge (78 px), y = 5.5 halfway between its top (56) and bottom (238).
  EXPECT_EQ(p.at(80, 147), 0x1f77b4u);
}

} // namespace
} // namespace kiln::tools::plot_test
