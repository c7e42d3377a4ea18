// Progress lines (runtime/progress.h): the bar fills with the fraction done, the count, figures,
// rate and time left follow, and the line is cut to the terminal's width. Progress draws only
// on a terminal (or when forced), and lines printed through it land above the bar. A status line
// (compiling) replaces its text in place and is erased when cleared.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "runtime/progress.h"

namespace kiln::progress_test {
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

TEST(Progress, StatusLineReplacesItsTextAndClears) {
  std::FILE *f = std::tmpfile();
  ASSERT_TRUE(f);
  {
    runtime::StatusLine quiet(f);
    EXPECT_FALSE(quiet.drawing()); // a file
    quiet.show("compiling");
  }
  {
    runtime::StatusLine forced(f, true);
    forced.show("pass 1 of 2 (cse)");
    forced.show("generating code");
    forced.clear();
    forced.clear(); // a second clear erases nothing more
  }
  std::rewind(f);
  std::string text(4096, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), f));
  std::fclose(f);
  const std::string erase = "\r\033[K";
  ASSERT_EQ(text.substr(0, erase.size()), erase) << text; // nothing from the quiet line
  const size_t second = text.find(erase + "generating code  (");
  EXPECT_NE(text.find("pass 1 of 2 (cse)  ("), std::string::npos) << text;
  ASSERT_NE(second, std::string::npos) << text;
  EXPECT_EQ(text.substr(text.size() - erase.size()), erase) << text;
  EXPECT_EQ(text.find(erase, second + erase.size()), text.size() - erase.size()) << text;
}

} // namespace
} // namespace kiln::progress_test
