// The fuzz targets without libFuzzer: runs LLVMFuzzerTestOneInput on every file named on the
// command line (directories: each file in them, in name order), so the seeds and every input that
// once broke a target run as ordinary tests in every build (tests: fuzz_replay_*).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int a = 1; a < argc; ++a) {
    std::error_code ec;
    if (fs::is_directory(argv[a], ec)) {
      for (const fs::directory_entry &e : fs::recursive_directory_iterator(argv[a]))
        if (e.is_regular_file())
          files.push_back(e.path());
    } else if (fs::is_regular_file(argv[a], ec)) {
      files.push_back(argv[a]);
    } else {
      std::fprintf(stderr, "replay: %s: no such file or directory\n", argv[a]);
      return 1;
    }
  }
  std::sort(files.begin(), files.end());
  for (const fs::path &p : files) {
    std::ifstream in(p, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  }
  std::printf("replayed %zu inputs\n", files.size());
  return 0;
}
