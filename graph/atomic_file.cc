#include "graph/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace headroom::graph {
namespace {

Status os_error(const std::string& path, const std::string& action, int error) {
  return Status::error(path + ": " + action + ": " + std::strerror(error));
}

std::string parent_directory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// After the rename the new file is in place; syncing the directory makes the
// rename itself durable. Some file systems refuse fsync on a directory (EINVAL),
// and reporting that as a failure would wrongly tell the caller that the old
// file survived, so this is best effort.
void sync_directory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

}  // namespace

int write_all(int fd, std::string_view contents) {
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    done += static_cast<size_t>(n);
  }
  return 0;
}

Status write_file_atomic(const std::string& path, std::string_view contents) {
  if (path.empty()) return Status::error("(empty path): expected a file name to write");
  std::vector<char> temp_name(path.begin(), path.end());
  const std::string suffix = ".tmp.XXXXXX";
  temp_name.insert(temp_name.end(), suffix.begin(), suffix.end());
  temp_name.push_back('\0');
  const int fd = ::mkostemp(temp_name.data(), O_CLOEXEC);
  if (fd < 0) return os_error(path, "cannot create a temporary file next to it", errno);
  const std::string temp(temp_name.data());

  auto abandon = [&](const std::string& action, int error, bool close_fd) {
    if (close_fd) ::close(fd);
    ::unlink(temp.c_str());
    return os_error(path, action, error);
  };
  // mkostemp creates mode 0600; keep the replaced file's mode, else the usual 0644.
  struct stat old_stat {};
  const mode_t mode = ::stat(path.c_str(), &old_stat) == 0 ? (old_stat.st_mode & 07777) : 0644;
  if (::fchmod(fd, mode) != 0) return abandon("cannot set the temporary file's mode", errno, true);
  if (int error = write_all(fd, contents); error != 0) {
    return abandon("cannot write " + temp, error, true);
  }
  if (::fsync(fd) != 0) return abandon("cannot flush " + temp + " to disk", errno, true);
  if (::close(fd) != 0) return abandon("cannot close " + temp, errno, false);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    return abandon("cannot rename the temporary file over it", errno, false);
  }
  sync_directory(parent_directory(path));
  return Status::ok();
}

Result<std::string> read_file(const std::string& path, int64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::error(path + ": no such file");
    return os_error(path, "cannot open", errno);
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    return os_error(path, "cannot stat", error);
  }
  if (S_ISDIR(info.st_mode)) {
    ::close(fd);
    return Status::error(path + ": is a directory (expected a file)");
  }
  auto too_large = [&](int64_t bytes) {
    return Status::error(path + ": file too large: " + std::to_string(bytes) +
                         " bytes or more (expected at most " + std::to_string(max_bytes) +
                         " bytes)");
  };
  if (S_ISREG(info.st_mode) && info.st_size > max_bytes) {
    ::close(fd);
    return too_large(info.st_size);
  }
  // Read until end of file rather than trusting st_size: pipes and /proc files
  // report 0, and a file may grow while it is read. Reserving the size a
  // regular file reports keeps a multi-gigabyte file (a checkpoint part) from
  // costing twice its size while the string grows.
  std::string contents;
  if (S_ISREG(info.st_mode)) contents.reserve(static_cast<size_t>(info.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      return os_error(path, "cannot read", error);
    }
    if (n == 0) break;
    if (static_cast<int64_t>(contents.size()) + n > max_bytes) {
      ::close(fd);
      return too_large(static_cast<int64_t>(contents.size()) + n);
    }
    contents.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return contents;
}

}  // namespace headroom::graph
