// Whole files in and out, for tests that write inputs and read back what a command left.
#pragma once

#include <fstream>
#include <iterator>
#include <string>

namespace harp::testing {

// The file's bytes ("" when it cannot be opened).
inline std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Replaces the file with `text`, byte for byte.
inline void write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

}  // namespace harp::testing
