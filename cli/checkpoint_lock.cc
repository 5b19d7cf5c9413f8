#include "cli/checkpoint_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace headroom::cli {
namespace {

namespace fs = std::filesystem;

// The PID the lock file names, or "" when it names none (an older file, one
// being written, or not readable).
std::string holder_pid(int fd) {
  std::array<char, 32> text{};
  const ssize_t n = ::pread(fd, text.data(), text.size() - 1, 0);
  if (n <= 0) return "";
  std::string pid(text.data(), static_cast<size_t>(n));
  pid = pid.substr(0, pid.find_first_not_of("0123456789"));
  return pid;
}

// Opens the lock file without following a link planted in its place. Read and
// write to record the PID; read-only when another user's file allows no more
// (flock needs no write access).
int open_lock_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW, 0644);
  if (fd >= 0 || errno != EACCES) return fd;
  return ::open(path.c_str(), O_RDONLY | O_NOFOLLOW);
}

Status in_use(const std::string& flag, const std::string& directory, const std::string& path,
              int fd) {
  const std::string pid = holder_pid(fd);
  const std::string holder = pid.empty() ? "another job" : "another job (PID " + pid + ")";
  return Status::runtime(
      flag + " " + directory + ": in use by " + holder + ", which holds " + path +
      "; expected one job per checkpoint directory (wait for that job to end or stop it, or "
      "give another directory)");
}

}  // namespace

CheckpointLock::~CheckpointLock() {
  if (fd_ >= 0) ::close(fd_);
}

CheckpointLock::CheckpointLock(CheckpointLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

CheckpointLock& CheckpointLock::operator=(CheckpointLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

Result<CheckpointLock> CheckpointLock::acquire(const std::string& directory,
                                               const std::string& flag) {
  // A directory that cannot be made or written holds no checkpoint of anyone's:
  // nothing to lock, and the run refuses it with its own message before step 1.
  std::error_code error;
  fs::create_directories(directory, error);
  const std::string path = (fs::path(directory) / kCheckpointLockName).string();
  const int fd = error ? -1 : open_lock_file(path);
  if (fd < 0) return CheckpointLock();
  CheckpointLock lock(fd);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return in_use(flag, directory, path, fd);
    return Status::io(flag + " " + directory + ": cannot lock " + path + ": " +
                      std::strerror(errno));
  }
  // Who holds it, for the next job's message; a failure here only loses that.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, pid.data(), pid.size(), 0);
  return lock;
}

Result<CheckpointLock> lock_checkpoint_directory(const executor::RunOptions& run) {
  if (!run.checkpoint_dir.empty())
    return CheckpointLock::acquire(run.checkpoint_dir, "--checkpoint-dir");
  std::error_code error;
  if (!run.resume_dir.empty() && fs::is_directory(run.resume_dir, error)) {
    return CheckpointLock::acquire(run.resume_dir, "--resume");
  }
  return CheckpointLock();
}

}  // namespace headroom::cli
