// A fresh, private folder for one test (mkdtemp under the system's temporary
// directory), removed with everything in it when the test ends. The one TempDir
// of every suite.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace headroom::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "headroom_test_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("TempDir: mkdtemp failed for " + pattern);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // The path of `name` inside the folder (not created).
  std::string file(const std::string& name) const { return (path / name).string(); }
  // The folder's own path as text.
  std::string str() const { return path.string(); }
  // How many entries the folder holds now.
  int entries() const {
    int count = 0;
    for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(path)) ++count;
    return count;
  }

  std::filesystem::path path;
};

}  // namespace headroom::testing
