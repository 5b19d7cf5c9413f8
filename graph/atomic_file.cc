#include "graph/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace headroom::graph {
namespace {

// As the kernel's limit on links followed in one path lookup (MAXSYMLINKS).
constexpr int kMaxLinkHops = 40;

// Writing an output fails for reasons outside the input (a full disk, a
// directory that does not exist or is not writable): kIo. Opening an input the
// user named fails because the name is wrong (missing, not readable): kInvalidInput.
Status os_error(const std::string& path, const std::string& action, int error) {
  return Status::io(path + ": " + action + ": " + std::strerror(error));
}

Status input_error(const std::string& path, const std::string& action, int error) {
  return Status::invalid_input(path + ": " + action + ": " + std::strerror(error));
}

std::string parent_directory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// What a non-regular file is, for messages.
std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
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

// Where the chain of symbolic links at `path` ends: a name that does not exist
// (a dangling link), which the write then creates, as a shell's `>` would.
Result<std::string> dangling_link_target(const std::string& path) {
  std::string current = path;
  for (int hop = 0; hop < kMaxLinkHops; ++hop) {
    struct stat info {};
    if (::lstat(current.c_str(), &info) != 0 || !S_ISLNK(info.st_mode)) return current;
    std::vector<char> target(PATH_MAX + 1);
    const ssize_t n = ::readlink(current.c_str(), target.data(), PATH_MAX);
    if (n < 0) return os_error(path, "cannot read the symbolic link " + current, errno);
    const std::string next(target.data(), static_cast<size_t>(n));
    current = next.front() == '/' ? next : parent_directory(current) + "/" + next;
  }
  return os_error(path, "cannot follow the symbolic link", ELOOP);
}

// The regular-file protocol: temporary file, fsync, rename, directory fsync.
// `shown` names the output in messages (the link, when `target` is its file).
Status replace_atomically(const std::string& shown, const std::string& target, std::string_view contents) {
  std::vector<char> temp_name(target.begin(), target.end());
  const std::string suffix = ".tmp.XXXXXX";
  temp_name.insert(temp_name.end(), suffix.begin(), suffix.end());
  temp_name.push_back('\0');
  const int fd = ::mkostemp(temp_name.data(), O_CLOEXEC);
  if (fd < 0) return os_error(shown, "cannot create a temporary file next to it", errno);
  const std::string temp(temp_name.data());

  auto abandon = [&](const std::string& action, int error, bool close_fd) {
    if (close_fd) ::close(fd);
    ::unlink(temp.c_str());
    return os_error(shown, action, error);
  };
  // mkostemp creates mode 0600; keep the replaced file's mode, else the usual 0644.
  struct stat old_stat {};
  const mode_t mode = ::stat(target.c_str(), &old_stat) == 0 ? (old_stat.st_mode & 07777) : 0644;
  if (::fchmod(fd, mode) != 0) return abandon("cannot set the temporary file's mode", errno, true);
  if (int error = write_all(fd, contents); error != 0) {
    return abandon("cannot write " + temp, error, true);
  }
  if (::fsync(fd) != 0) return abandon("cannot flush " + temp + " to disk", errno, true);
  if (::close(fd) != 0) return abandon("cannot close " + temp, errno, false);
  if (::rename(temp.c_str(), target.c_str()) != 0) {
    return abandon("cannot rename the temporary file over it", errno, false);
  }
  sync_directory(parent_directory(target));
  return Status::ok();
}

// A character device or FIFO: written in place, never replaced. O_NONBLOCK
// makes opening a FIFO without a reader fail (ENXIO) instead of waiting forever.
Status write_through(const std::string& path, std::string_view contents) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENXIO) {
      return Status::io(
          path +
          ": a FIFO that no process is reading (expected a reader on it, or a regular file)");
    }
    return os_error(path, "cannot open for writing", errno);
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0 || write_method_for(info.st_mode) != WriteMethod::kWriteThrough) {
    ::close(fd);
    return Status::io(path +
                      ": changed while it was opened (expected a device or FIFO to write to)");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int error = errno;
    ::close(fd);
    return os_error(path, "cannot set blocking writes", error);
  }
  if (int error = write_all(fd, contents); error != 0) {
    ::close(fd);
    return os_error(path, "cannot write", error);
  }
  if (::close(fd) != 0) return os_error(path, "cannot close", errno);
  return Status::ok();
}

}  // namespace

WriteMethod write_method_for(mode_t mode) {
  if (S_ISREG(mode)) return WriteMethod::kReplaceAtomically;
  if (S_ISCHR(mode) || S_ISFIFO(mode)) return WriteMethod::kWriteThrough;
  return WriteMethod::kRefuse;
}

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
  if (path.empty()) return Status::invalid_input("(empty path): expected a file name to write");
  struct stat link {};
  if (::lstat(path.c_str(), &link) != 0) {
    if (errno != ENOENT) return os_error(path, "cannot inspect", errno);
    return replace_atomically(path, path, contents);  // a new file
  }
  struct stat target {};
  if (::stat(path.c_str(), &target) != 0) {
    if (errno != ENOENT) return os_error(path, "cannot follow the symbolic link", errno);
    Result<std::string> created = dangling_link_target(path);
    if (!created.is_ok()) return created.status();
    return replace_atomically(path + " (a link to " + created.value() + ")", created.value(), contents);
  }
  switch (write_method_for(target.st_mode)) {
    case WriteMethod::kWriteThrough:
      return write_through(path, contents);
    case WriteMethod::kRefuse:
      return Status::io(
          path + ": is " + kind_of(target.st_mode) +
          " (expected a regular file, a new file name, a character device or a FIFO)");
    case WriteMethod::kReplaceAtomically:
      break;
  }
  if (!S_ISLNK(link.st_mode)) return replace_atomically(path, path, contents);
  // A link to a regular file: the link stays, the file it names is replaced.
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return os_error(path, "cannot resolve the symbolic link", errno);
  const std::string file(resolved);
  std::free(resolved);
  return replace_atomically(path + " (a link to " + file + ")", file, contents);
}

Result<int> open_for_appending(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOCTTY | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == ENXIO) {
      return Status::io(
          path +
          ": a FIFO that no process is reading (expected a reader on it, or a regular file)");
    }
    return os_error(path, "cannot open for appending", errno);
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0 || write_method_for(info.st_mode) == WriteMethod::kRefuse) {
    ::close(fd);
    return Status::io(path + ": is " + kind_of(info.st_mode) +
                      " (expected a regular file, a character device or a FIFO)");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int error = errno;
    ::close(fd);
    return os_error(path, "cannot set blocking writes", error);
  }
  return fd;
}

Result<int> open_regular_file(const std::string& path) {
  // open() stops at a NUL, so "real.json\0junk" (a JSON string can hold one) would
  // read real.json; the message shows the NUL as \0 rather than printing it.
  if (path.find('\0') != std::string::npos) {
    std::string shown;
    for (char c : path) shown += c == '\0' ? std::string("\\0") : std::string(1, c);
    return Status::invalid_input(shown + ": a file name with a NUL byte in it (expected a path without one)");
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::invalid_input(path + ": no such file");
    return input_error(path, "cannot open", errno);
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    return os_error(path, "cannot stat", error);
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return Status::invalid_input(path + ": is " + kind_of(info.st_mode) +
                                 " (expected a regular file)");
  }
  // Regular files ignore O_NONBLOCK; cleared all the same so reads behave as usual.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

Result<std::string> read_file(const std::string& path, int64_t max_bytes) {
  Result<int> opened = open_regular_file(path);
  if (!opened.is_ok()) return opened.status();
  const int fd = opened.value();
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    return os_error(path, "cannot stat", error);
  }
  auto too_large = [&](int64_t bytes) {
    return Status::invalid_input(path + ": file too large: " + std::to_string(bytes) +
                                 " bytes or more (expected at most " + std::to_string(max_bytes) +
                                 " bytes)");
  };
  if (info.st_size > max_bytes) {
    ::close(fd);
    return too_large(info.st_size);
  }
  // Read until end of file rather than trusting st_size: /proc files report 0,
  // and a file may grow while it is read. Reserving the size the file reports
  // keeps a multi-gigabyte file (a checkpoint part) from costing twice its size
  // while the string grows.
  std::string contents;
  contents.reserve(static_cast<size_t>(info.st_size));
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
