// Replays fuzz inputs through a target as an ordinary test: every file of the given
// directories (the seed corpus, and every crash ever found) once. A property violation
// aborts, so the test fails; a missing directory is an error, not an empty pass.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <vector>

#include <algorithm>
#include <cstring>

#include "fuzz.hpp"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 2 || std::string_view(argv[1]) == "--help") {
    std::cerr << "usage: " << argv[0] << " DIR_OR_FILE...\n"
              << "Runs every input file through the fuzz target once (the replay of its corpus and crashes).\n";
    return argc < 2 ? 2 : 0;
  }
  std::size_t files = 0;
  for (int i = 1; i < argc; ++i) {
    const fs::path p = argv[i];
    std::vector<fs::path> inputs;
    if (fs::is_directory(p)) {
      for (const auto& e : fs::directory_iterator(p))
        if (e.is_regular_file() && e.path().filename() != "README") inputs.push_back(e.path());
    } else if (fs::is_regular_file(p)) {
      inputs.push_back(p);
    } else {
      std::cerr << "replay: " << p << " is neither a file nor a directory\n";
      return 1;
    }
    std::sort(inputs.begin(), inputs.end());
    for (const auto& f : inputs) {
      std::ifstream in(f, std::ios::binary);
      const std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
      LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
      ++files;
    }
  }
  std::cout << "replayed " << files << " inputs\n";
  return files ? 0 : 1;
}
