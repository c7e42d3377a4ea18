// No code tells outputs or state apart by their names: roles (ir::OutputRole) and domains
// (ir::Domain) say what they are, and names are for people. This scans the sources of every layer
// for the name tests that used to stand in for roles ("grad." and "new." prefixes, the output
// named "loss", the state named "opt.step") so that none comes back.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

namespace kiln {
namespace {

namespace fs = std::filesystem;

TEST(Lint, NoCodeFindsOutputsOrStateByName) {
  const std::regex forbidden(
      R"re((starts_with|rfind|find)\(\s*"(grad|new|opt)\.)re" // prefix tests
      R"re(|kNewPrefix)re"                                    // the old prefix constant
      R"re(|findOutput\(\s*"(loss|grad\.|new\.))re"           // lookups by a role's name
      R"re(|name\s*==\s*"(loss|opt\.step)")re");              // name comparisons
  int files = 0;
  for (const char *dir : {"ir", "frontend", "models", "passes", "codegen", "runtime", "tools"}) {
    fs::path root = fs::path(KILN_SOURCE_DIR) / dir;
    ASSERT_TRUE(fs::is_directory(root)) << root;
    for (const fs::directory_entry &e : fs::recursive_directory_iterator(root)) {
      std::string ext = e.path().extension().string();
      if (ext != ".cc" && ext != ".h")
        continue;
      ++files;
      std::ifstream in(e.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n)
        EXPECT_FALSE(std::regex_search(line, forbidden))
            << e.path().string() << ":" << n << ": " << line;
    }
  }
  EXPECT_GT(files, 100);
}

} // namespace
} // namespace kiln
