// Conventions the compiler cannot check, checked on the sources of every layer:
// - No code tells outputs or state apart by their names: roles (ir::OutputRole) and domains
//   (ir::Domain) say what they are, and names are for people (the "grad." and "new." prefixes,
//   the output named "loss", the state named "opt.step" used to stand in for roles).
// - No code dispatches on op kinds with a switch: what an op is lives in its record (ir/ops/),
//   and the backends' tables are built from the records (a new op needs no case anywhere).
// - No backend includes another: what they share is in codegen/common.
// - No two files of a library share a file-scope name, and each test file has a namespace of
//   its own (for the unity build).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::name_conventions_test {
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

// No two files of one library define one name at file scope in their anonymous namespaces (a
// type, alias, constant or function that starts a line there). The unity build (CMakeLists.txt)
// compiles a batch of a library's files as one translation unit, where the two would be in one
// namespace: a clash, or, for two functions, overloads that either file's calls may resolve to.
TEST(Lint, NoTwoFilesOfALibraryShareAFileScopeName) {
  const std::regex declared(
      R"re(^(?:template <[^>]*> )?(?:struct|class|enum(?: class)?|union) (\w+)\b)re"
      R"re(|^using (\w+) =)re"
      R"re(|^(?:static )?(?:inline )?(?:constexpr|const) [\w:<>,*& ]+?[ *&](\w+)(?: =| \{|\{|\[|\())re"
      R"re(|^(?!return\b|else\b|case\b)[A-Za-z_][\w:<>,*& ]*?[ *&](\w+)\()re");
  // The source directories of each library (CMakeLists.txt's kiln_library and kiln_runtime).
  const std::vector<std::vector<std::string>> libraries = {{"ir", "ir/ops"},
                                                           {"frontend"},
                                                           {"models"},
                                                           {"passes"},
                                                           {"runtime", "runtime/kernels"},
                                                           {"runtime/mpi"},
                                                           {"codegen/common"},
                                                           {"codegen/reference"},
                                                           {"codegen/llvm"},
                                                           {"codegen"},
                                                           {"interop"},
                                                           {"tools"}};
  int files = 0;
  for (const std::vector<std::string> &dirs : libraries) {
    std::map<std::string, std::string> firstFile; // name -> the file that defines it first
    for (const std::string &dir : dirs)
      for (const fs::directory_entry &e : fs::directory_iterator(fs::path(KILN_SOURCE_DIR) / dir)) {
        if (e.path().extension() != ".cc")
          continue;
        ++files;
        const std::string path = dir + "/" + e.path().filename().string();
        std::ifstream in(e.path());
        std::string line;
        std::smatch m;
        bool anonymous = false;
        for (int n = 1; std::getline(in, line); ++n) {
          if (line.starts_with("namespace {"))
            anonymous = true;
          else if (line.starts_with("} // namespace"))
            anonymous = false;
          else if (anonymous && std::regex_search(line, m, declared)) {
            std::string name;
            for (size_t g = 1; g < m.size() && name.empty(); ++g)
              name = m[g];
            auto [it, fresh] = firstFile.emplace(name, path);
            EXPECT_TRUE(fresh || it->second == path)
                << path << ":" << n << ": \"" << name << "\" is also a file-scope name of "
                << it->second << ", in the same library";
          }
        }
      }
  }
  EXPECT_GT(files, 150);
}

// Every test file's code is in a namespace of its own, named after the file (tests/ir/dot_test.cc's
// in kiln::ir::dot_test). The unity build (CMakeLists.txt) compiles a batch of test files as one
// translation unit, in which the anonymous namespaces of one namespace are one: two files' helpers
// of one name would collide, or a later file would quietly find an earlier one's.
TEST(Lint, EachTestFileHasANamespaceOfItsOwn) {
  const std::regex opening(R"re(namespace ([a-z0-9_:]+) \{)re");
  int files = 0;
  for (const fs::directory_entry &e :
       fs::recursive_directory_iterator(fs::path(KILN_SOURCE_DIR) / "tests")) {
    const std::string name = e.path().filename().string();
    if (!name.ends_with("_test.cc"))
      continue;
    ++files;
    const std::string own = "::" + name.substr(0, name.size() - 3);
    std::ifstream in(e.path());
    std::string line, first;
    std::smatch m;
    while (first.empty() && std::getline(in, line))
      if (std::regex_match(line, m, opening))
        first = m[1];
    EXPECT_TRUE(first.ends_with(own)) << e.path().string() << ": its first namespace is \"" << first
                                      << "\", not one ending in \"" << own << "\"";
  }
  EXPECT_GT(files, 70);
}

} // namespace
} // namespace kiln::name_conventions_test
