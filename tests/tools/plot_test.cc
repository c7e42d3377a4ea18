// The loss chart's axes (tools/plot.h).
#include <gtest/gtest.h>

#include <vector>

#include "tools/plot.h"

namespace kiln::tools {
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

} // namespace
} // namespace kiln::tools
