#include "graph/atomic_file.h"

#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

namespace headroom::graph {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test case, removed afterwards.
struct TempDir {
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("headroom_atomic_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  int entries() const {
    int count = 0;
    for ([[maybe_unused]] const auto& entry : fs::directory_iterator(path)) ++count;
    return count;
  }
  fs::path path;
};

void write_plain(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
}

std::string read_back(const std::string& path) {
  Result<std::string> text = read_file(path);
  REQUIRE(text.is_ok());
  return text.value();
}

TEST_CASE("write_file_atomic writes and replaces") {
  TempDir dir;
  const std::string path = dir.file("graph.json");
  REQUIRE(write_file_atomic(path, "first").is_ok());
  CHECK(read_back(path) == "first");
  REQUIRE(write_file_atomic(path, std::string("sec\0nd", 6)).is_ok());
  CHECK(read_back(path) == std::string("sec\0nd", 6));
  REQUIRE(write_file_atomic(path, "").is_ok());
  CHECK(read_back(path).empty());
  CHECK(dir.entries() == 1);  // no temporary file left behind
}

TEST_CASE("write_file_atomic sets 0644 on new files and keeps an old file's mode") {
  TempDir dir;
  const std::string path = dir.file("mode.json");
  REQUIRE(write_file_atomic(path, "a").is_ok());
  CHECK((fs::status(path).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
         fs::perms::others_read));
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  REQUIRE(write_file_atomic(path, "b").is_ok());
  CHECK((fs::status(path).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write));
}

TEST_CASE("write_file_atomic into a missing directory fails with the path") {
  TempDir dir;
  const std::string path = dir.file("missing/graph.json");
  const Status status = write_file_atomic(path, "x");
  REQUIRE_FALSE(status.is_ok());
  CAPTURE(status.message());
  CHECK(status.message().find(path) == 0);
  CHECK(status.message().find("No such file or directory") != std::string::npos);
  CHECK(dir.entries() == 0);
}

TEST_CASE("write_file_atomic under a regular file fails cleanly") {
  TempDir dir;
  const std::string parent = dir.file("plain");
  write_plain(parent, "keep");
  const Status status = write_file_atomic(parent + "/graph.json", "x");
  REQUIRE_FALSE(status.is_ok());
  CHECK(status.message().find("Not a directory") != std::string::npos);
  CHECK(read_back(parent) == "keep");
  CHECK(dir.entries() == 1);
}

TEST_CASE("write_file_atomic over a non-empty directory leaves it and removes the temp") {
  TempDir dir;
  const std::string target = dir.file("target");
  fs::create_directories(target);
  write_plain(target + "/inside", "keep");
  const Status status = write_file_atomic(target, "x");
  REQUIRE_FALSE(status.is_ok());
  CHECK(status.message().find("cannot rename") != std::string::npos);
  CHECK(read_back(target + "/inside") == "keep");
  CHECK(dir.entries() == 1);
}

TEST_CASE("a write that fails midway leaves the old file intact") {
  // Fault injection without a seam in the code: a file-size limit makes write()
  // fail with EFBIG part way through the temporary file (SIGXFSZ is ignored so
  // the failure arrives as an error, not a signal). Works as root too, unlike a
  // read-only directory.
  TempDir dir;
  const std::string path = dir.file("graph.json");
  write_plain(path, "old contents");
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
  auto* previous = std::signal(SIGXFSZ, SIG_IGN);
  rlimit limited = saved;
  limited.rlim_cur = 4096;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &limited) == 0);
  const Status status = write_file_atomic(path, std::string(1 << 20, 'x'));
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, previous);
  REQUIRE_FALSE(status.is_ok());
  CAPTURE(status.message());
  CHECK(status.message().find("cannot write") != std::string::npos);
  CHECK(status.message().find("File too large") != std::string::npos);
  CHECK(read_back(path) == "old contents");
  CHECK(dir.entries() == 1);
}

TEST_CASE("read_file errors name the path and the problem") {
  TempDir dir;
  SUBCASE("missing") {
    const Result<std::string> text = read_file(dir.file("nope.json"));
    REQUIRE_FALSE(text.is_ok());
    CHECK(text.message() == dir.file("nope.json") + ": no such file");
  }
  SUBCASE("directory") {
    const Result<std::string> text = read_file(dir.path.string());
    REQUIRE_FALSE(text.is_ok());
    CHECK(text.message().find("is a directory") != std::string::npos);
  }
  SUBCASE("too large") {
    write_plain(dir.file("big"), std::string(100, 'x'));
    const Result<std::string> text = read_file(dir.file("big"), 99);
    REQUIRE_FALSE(text.is_ok());
    CHECK(text.message().find("file too large") != std::string::npos);
    CHECK(text.message().find("at most 99 bytes") != std::string::npos);
    CHECK(read_file(dir.file("big"), 100).is_ok());
  }
  SUBCASE("files that report size 0 are read to the end, within the limit") {
    const Result<std::string> status = read_file("/proc/self/status");
    REQUIRE(status.is_ok());
    CHECK(status.value().find("Name:") != std::string::npos);
    CHECK_FALSE(read_file("/proc/self/status", 10).is_ok());
  }
}

}  // namespace
}  // namespace headroom::graph
