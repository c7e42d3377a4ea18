// Conventions the compiler cannot check, checked on the sources of every layer:
// - No code tells outputs or state apart by their names: roles (ir::OutputRole) and domains
//   (ir::Domain) say what they are, and names are for people (the "grad." and "new." prefixes,
//   the output named "loss", the state named "opt.step" used to stand in for roles).
// - No code dispatches on op kinds with a switch: what an op is lives in its record (ir/ops/),
//   and the backends' tables are built from the records (a new op needs no case anywhere).
// - No backend includes another: what they share is in codegen/common.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Every line matching `pattern` in the sources of the library's layers, as "path:line: text".
std::vector<std::string> linesMatching(const std::regex &pattern, int *files) {
  std::vector<std::string> hits;
  for (const char *dir :
       {"ir", "frontend", "models", "passes", "codegen", "runtime", "interop", "tools"}) {
    fs::path root = fs::path(KILN_SOURCE_DIR) / dir;
    EXPECT_TRUE(fs::is_directory(root)) << root;
    for (const fs::directory_entry &e : fs::recursive_directory_iterator(root)) {
      std::string ext = e.path().extension().string();
      if (ext != ".cc" && ext != ".h")
        continue;
      ++*files;
      std::ifstream in(e.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n)
        if (std::regex_search(line, pattern))
          hits.push_back(e.path().string() + ":" + std::to_string(n) + ": " + line);
    }
  }
  return hits;
}

TEST(Lint, NoCodeFindsOutputsOrStateByName) {
  const std::regex forbidden(
      R"re((starts_with|rfind|find)\(\s*"(grad|new|opt)\.)re" // prefix tests
      R"re(|kNewPrefix)re"                                    // the old prefix constant
      R"re(|findOutput\(\s*"(loss|grad\.|new\.))re"           // lookups by a role's name
      R"re(|name\s*==\s*"(loss|opt\.step)")re");              // name comparisons
  int files = 0;
  for (const std::string &hit : linesMatching(forbidden, &files))
    ADD_FAILURE() << hit;
  EXPECT_GT(files, 100);
}

TEST(Lint, NoSwitchOverOpKinds) {
  const std::regex forbidden(R"re(case\s+(ir::)?(OpKind|K)::)re");
  int files = 0;
  for (const std::string &hit : linesMatching(forbidden, &files))
    ADD_FAILURE() << hit;
  EXPECT_GT(files, 100);
}

TEST(Lint, NoBackendIncludesAnother) {
  for (const char *backend : {"reference", "llvm"}) {
    const std::regex other(
        fmt::format(R"re(#include "codegen/(?!common/|{}/)[a-z_]+/)re", backend));
    fs::path root = fs::path(KILN_SOURCE_DIR) / "codegen" / backend;
    int files = 0;
    for (const fs::directory_entry &e : fs::recursive_directory_iterator(root)) {
      ++files;
      std::ifstream in(e.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n)
        EXPECT_FALSE(std::regex_search(line, other))
            << e.path().string() << ":" << n << ": " << line;
    }
    EXPECT_GT(files, 2) << backend;
  }
}

} // namespace
} // namespace kiln
