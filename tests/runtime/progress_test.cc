// Progress lines (runtime/progress.h): the bar fills with the fraction done, the count, figures,
// rate and time left follow, and the line is cut to the terminal's width. Progress draws only
// on a terminal (or when forced), and lines printed through it land above the bar.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "runtime/progress.h"

namespace kiln {
namespace {

using runtime::progressLine;

TEST(Progress, LineShowsBarCountFiguresRateAndEta) {
  EXPECT_EQ(progressLine(0, 10, "", -1, "tok", -1, 200), "[>                   ] 0/10");
  EXPECT_EQ(progressLine(5, 10, "loss 2.5000", 15200, "tok", 42, 200),
            "[==========>         ] 5/10  loss 2.5000  15.2k tok/s  ETA 0:42");
  EXPECT_EQ(progressLine(10, 10, "", 3e6, "tok", 3725, 200),
            "[====================] 10/10  3.0M tok/s  ETA 1:02:05");
  EXPECT_EQ(progressLine(5, 10, "loss 2.5000", 15200, "tok", 42, 30),
            "[==========>         ] 5/10  l"); // 30 columns
}

TEST(Progress, DrawsOnlyOnATerminalAndPrintsLinesAboveTheBar) {
  std::FILE *f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    runtime::Progress quiet(10, "tok", f);
    EXPECT_FALSE(quiet.drawing()); // a file
    quiet.update(3, 300, "loss 1");
    quiet.line("step 3");
  }
  {
    runtime::Progress forced(10, "tok", f, true);
    forced.update(10, 1000, "loss 0.5");
    forced.line("done");
  }
  std::rewind(f);
  std::string text(4096, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), f));
  std::fclose(f);
  EXPECT_EQ(text.substr(0, 7), "step 3\n");
  EXPECT_NE(text.find("[====================] 10/10  loss 0.5"), std::string::npos) << text;
  EXPECT_NE(text.find("\r\033[Kdone\n"), std::string::npos) << text;
}

} // namespace
} // namespace kiln
