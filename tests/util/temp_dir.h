// A test fixture with a fresh directory of its own (named after the test, removed afterwards),
// and the file helpers the file-writing tests share: list the directory (so a test sees any
// temporary file left behind), read and write whole files.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace kiln::testing_files {

// A path in the temporary directory named after the running test (ctest runs tests side by side,
// so two tests never share a file): kiln_SUITE_TEST, plus `suffix`.
inline std::filesystem::path perTestPath(std::string_view suffix = "") {
  const ::testing::TestInfo *t = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::filesystem::path(::testing::TempDir()) /
         fmt::format("kiln_{}_{}{}", t->test_suite_name(), t->name(), suffix);
}

class TempDirTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = perTestPath();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The names in the directory, sorted.
  std::vector<std::string> listDir() const {
    std::vector<std::string> names;
    for (const auto &e : std::filesystem::directory_iterator(dir_))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  static std::vector<uint8_t> readBytes(const std::filesystem::path &path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  static std::string readText(const std::filesystem::path &path) {
    std::vector<uint8_t> b = readBytes(path);
    return {b.begin(), b.end()};
  }
  static void writeBytes(const std::filesystem::path &path, const std::vector<uint8_t> &bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char *>(bytes.data()), std::ssize(bytes));
  }

  std::filesystem::path dir_;
};

} // namespace kiln::testing_files
