// The operating system's file system for the training-state store
// (executor/state_store.h): POSIX calls, every error naming the path and the
// OS reason.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <system_error>
#include <vector>

#include "executor/state_store.h"
#include "graph/atomic_file.h"

namespace headroom::executor {
namespace {

Status os_error(const std::string& path, const std::string& action, int error) {
  return Status::io(path + ": " + action + ": " + std::strerror(error));
}

std::string parent_of(const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const size_t slash = trimmed.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return trimmed.substr(0, slash);
}

class PosixFileSystem final : public FileSystem {
 public:
  Result<int64_t> free_bytes(const std::string& directory) override {
    struct statvfs info {};
    if (::statvfs(directory.c_str(), &info) != 0)
      return os_error(directory, "cannot query free space", errno);
    // f_bavail, not f_bfree: blocks reserved for root are not ours to fill.
    const auto max = static_cast<unsigned long long>(std::numeric_limits<int64_t>::max());
    const unsigned long long blocks = info.f_bavail, block_bytes = info.f_frsize;
    if (block_bytes != 0 && blocks > max / block_bytes) return std::numeric_limits<int64_t>::max();
    return static_cast<int64_t>(blocks * block_bytes);
  }

  Status make_directory(const std::string& path) override {
    if (path.empty()) return Status::invalid_input("(empty path): expected a directory name");
    for (size_t end = 1; end <= path.size(); ++end) {
      if (end < path.size() && path[end] != '/') continue;
      const std::string prefix = path.substr(0, end);
      if (prefix.back() == '/') continue;
      if (::mkdir(prefix.c_str(), 0755) == 0) {
        // The new entry lives in its parent: without this a power loss can
        // take the whole checkpoint directory with it.
        (void)sync_directory(parent_of(prefix));
      } else if (errno != EEXIST) {
        return os_error(prefix, "cannot create directory", errno);
      }
    }
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) return os_error(path, "cannot create directory", errno);
    if (!S_ISDIR(info.st_mode)) return Status::io(path + ": exists but is not a directory");
    return Status::ok();
  }

  Result<std::vector<std::string>> list_directory(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) {
      if (errno == ENOENT) return Status::invalid_input(path + ": no such directory");
      return os_error(path, "cannot list directory", errno);
    }
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
      errno = 0;
    }
    const int error = errno;
    ::closedir(dir);
    if (error != 0) return os_error(path, "cannot list directory", error);
    std::sort(names.begin(), names.end());
    return names;
  }

  bool exists(const std::string& path) override {
    struct stat info {};
    return ::lstat(path.c_str(), &info) == 0;
  }

  Result<int64_t> file_size(const std::string& path) override {
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) {
      if (errno == ENOENT) return Status::invalid_input(path + ": no such file");
      return os_error(path, "cannot stat", errno);
    }
    if (!S_ISREG(info.st_mode)) return Status::invalid_input(path + ": not a regular file");
    return static_cast<int64_t>(info.st_size);
  }

  Status write_file(const std::string& path, std::string_view contents) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return os_error(path, "cannot create", errno);
    if (const int error = graph::write_all(fd, contents); error != 0) {
      ::close(fd);
      return os_error(path, "cannot write", error);
    }
    if (::fsync(fd) != 0) {
      const int error = errno;
      ::close(fd);
      return os_error(path, "cannot flush to disk (fsync)", error);
    }
    // close() can report a deferred write error (NFS): it counts.
    if (::close(fd) != 0) return os_error(path, "cannot close", errno);
    return Status::ok();
  }

  Result<std::string> read_file(const std::string& path) override {
    return graph::read_file(path, std::numeric_limits<int64_t>::max());  // sizes are checked against the manifest
  }

  Status rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0)
      return os_error(from, "cannot rename to " + to, errno);
    return Status::ok();
  }

  Status sync_directory(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return os_error(path, "cannot open directory to flush it", errno);
    const int result = ::fsync(fd);
    const int error = errno;
    ::close(fd);
    // Some file systems cannot fsync a directory and say EINVAL; there is
    // nothing more to do there, and failing would refuse every save.
    if (result != 0 && error != EINVAL)
      return os_error(path, "cannot flush directory to disk (fsync)", error);
    return Status::ok();
  }

  Status remove_all(const std::string& path) override {
    std::error_code error;
    std::filesystem::remove_all(path, error);
    if (error) return Status::io(path + ": cannot remove: " + error.message());
    return Status::ok();
  }
};

}  // namespace

std::string parent_directory(const std::string& path) { return parent_of(path); }

FileSystem& real_file_system() {
  static PosixFileSystem file_system;
  return file_system;
}

}  // namespace headroom::executor
