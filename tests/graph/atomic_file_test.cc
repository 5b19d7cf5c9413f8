#include "graph/atomic_file.h"

#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/sysmacros.h>

#include <chrono>
#include <csignal>
#include <iterator>
#include <thread>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace headroom::graph {
namespace {

using headroom::testing::TempDir;

namespace fs = std::filesystem;

// A fresh directory per test case, removed afterwards.
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

TEST_CASE("write_file_atomic over a non-empty directory refuses and leaves it") {
  TempDir dir;
  const std::string target = dir.file("target");
  fs::create_directories(target);
  write_plain(target + "/inside", "keep");
  const Status status = write_file_atomic(target, "x");
  REQUIRE_FALSE(status.is_ok());
  CHECK(status.message() == target + ": is a directory (expected a regular file, a new file name, a character "
                                     "device or a FIFO)");
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

TEST_CASE("write_method_for: only regular files are replaced, devices and FIFOs written through") {
  CHECK(write_method_for(S_IFREG | 0644) == WriteMethod::kReplaceAtomically);
  CHECK(write_method_for(S_IFCHR | 0666) == WriteMethod::kWriteThrough);
  CHECK(write_method_for(S_IFIFO | 0600) == WriteMethod::kWriteThrough);
  CHECK(write_method_for(S_IFDIR | 0755) == WriteMethod::kRefuse);
  CHECK(write_method_for(S_IFBLK | 0660) == WriteMethod::kRefuse);
  CHECK(write_method_for(S_IFSOCK | 0755) == WriteMethod::kRefuse);
}

TEST_CASE("write_file_atomic keeps a symbolic link and replaces the file it names") {
  TempDir dir;
  const std::string target = dir.file("real.json");
  write_plain(target, "old");
  SUBCASE("absolute link") { fs::create_symlink(target, dir.file("link.json")); }
  SUBCASE("relative link") { fs::create_symlink("real.json", dir.file("link.json")); }
  SUBCASE("link to a link") {
    fs::create_symlink("real.json", dir.file("middle.json"));
    fs::create_symlink(dir.file("middle.json"), dir.file("link.json"));
  }
  REQUIRE(write_file_atomic(dir.file("link.json"), "new").is_ok());
  CHECK(fs::is_symlink(dir.file("link.json")));
  CHECK(read_back(target) == "new");
  CHECK(read_back(dir.file("link.json")) == "new");
  for (const auto& entry : fs::directory_iterator(dir.path)) {
    CHECK(entry.path().filename().string().find(".tmp.") == std::string::npos);
  }
}

TEST_CASE("write_file_atomic through a dangling link creates the file it names") {
  TempDir dir;
  fs::create_symlink("created.json", dir.file("link.json"));
  REQUIRE(write_file_atomic(dir.file("link.json"), "made").is_ok());
  CHECK(fs::is_symlink(dir.file("link.json")));
  CHECK(read_back(dir.file("created.json")) == "made");
}

TEST_CASE("write_file_atomic writes through a FIFO and never replaces it") {
  TempDir dir;
  const std::string fifo = dir.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  SUBCASE("with a reader: the contents arrive through the FIFO") {
    std::string received;
    std::thread reader([&] {
      std::ifstream in(fifo, std::ios::binary);
      received.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    });
    // The reader's open may come after the writer's: retry until it is there.
    Status status = Status::io("not tried");
    for (int attempt = 0; attempt < 500 && !status.is_ok(); ++attempt) {
      status = write_file_atomic(fifo, "through the pipe");
      if (!status.is_ok()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    reader.join();
    CHECK(status.is_ok());
    CHECK(received == "through the pipe");
  }
  SUBCASE("without a reader: an error at once, not a wait") {
    const Status status = write_file_atomic(fifo, "nobody listens");
    REQUIRE_FALSE(status.is_ok());
    CHECK(status.message().find(fifo + ": a FIFO that no process is reading") == 0);
  }
  CHECK(fs::is_fifo(fifo));
  CHECK(dir.entries() == 1);
}

TEST_CASE("write_file_atomic writes through a character device and never replaces it") {
  // The reproducer of issue 14: a node like /dev/null (char 1:3) in a scratch
  // directory. Creating one needs root; elsewhere the decision table above holds.
  TempDir dir;
  const std::string node = dir.file("null");
  if (::mknod(node.c_str(), S_IFCHR | 0666, ::makedev(1, 3)) != 0) {
    MESSAGE("skipped: mknod needs root");
    return;
  }
  REQUIRE(write_file_atomic(node, "discarded").is_ok());
  CHECK(fs::is_character_file(node));
  CHECK(dir.entries() == 1);
}

TEST_CASE("read_file refuses a FIFO at once instead of waiting for a writer") {
  TempDir dir;
  const std::string fifo = dir.file("pipe.json");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const Result<std::string> text = read_file(fifo);
  REQUIRE_FALSE(text.is_ok());
  CHECK(text.message() == fifo + ": is a FIFO (expected a regular file)");
  const Result<int> opened = open_regular_file(fifo);
  CHECK_FALSE(opened.is_ok());
}

TEST_CASE("read_file refuses a path with a NUL in it rather than reading the part before it") {
  TempDir dir;
  write_plain(dir.file("real.json"), "{}");
  const std::string path = dir.file("real.json") + std::string(1, '\0') + "junk";
  const Result<std::string> text = read_file(path);
  REQUIRE_FALSE(text.is_ok());
  CHECK(text.message() == dir.file("real.json") + "\\0junk: a file name with a NUL byte in it (expected a path without one)");
  CHECK(text.message().find('\0') == std::string::npos);
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
