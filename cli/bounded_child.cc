#include "cli/bounded_child.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>

#include "cli/escaped_descendants.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX, for the child's environment

namespace headroom::cli {
namespace {

using Clock = std::chrono::steady_clock;

// How often the parent checks whether the child has exited while its pipes
// stay open (a background grandchild holds them).
constexpr int kPollSliceMs = 20;

// In the child, between fork and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(char* const* argv, char* const* envp, int out_fd, int err_fd,
                             const ChildLimits& limits) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (limits.address_space_bytes > 0) {
    const auto bytes = static_cast<rlim_t>(limits.address_space_bytes);
    const rlimit limit{bytes, bytes};
    setrlimit(RLIMIT_AS, &limit);
  }
  dup2(out_fd, STDOUT_FILENO);
  dup2(err_fd, STDERR_FILENO);
  close(STDIN_FILENO);
  execvpe(argv[0], argv, envp);
  const char* reason = std::strerror(errno);
  (void)!write(STDERR_FILENO, "cannot start ", 13);
  (void)!write(STDERR_FILENO, argv[0], std::strlen(argv[0]));
  (void)!write(STDERR_FILENO, ": ", 2);
  (void)!write(STDERR_FILENO, reason, std::strlen(reason));
  (void)!write(STDERR_FILENO, "\n", 1);
  _exit(127);
}

// The parent's side: both pipes read together until the child exits (or
// overruns); then whatever is left in them, without waiting for other writers.
class Collector {
 public:
  Collector(pid_t pid, int out_fd, int err_fd, const ChildLimits& limits)
      : pid_(pid), limits_(limits), fds_{pollfd{out_fd, POLLIN, 0}, pollfd{err_fd, POLLIN, 0}} {}
  ~Collector() {
    for (const pollfd& fd : fds_) {
      if (fd.fd >= 0) close(fd.fd);
    }
  }
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;

  ChildOutcome run() {
    const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(limits_.timeout_ms);
    int status = 0;
    bool exited = false;
    while (!exited && !outcome_.stdout_overflow) {
      if (Clock::now() >= deadline) {
        outcome_.timed_out = true;
        break;
      }
      read_ready(kPollSliceMs);
      exited = waitpid(pid_, &status, WNOHANG) == pid_;
    }
    if (exited) read_ready(0);  // what the child wrote just before it exited
    kill(-pid_, SIGKILL);       // the child if it overran, and whatever it left running
    if (!exited) {
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
    outcome_.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    outcome_.term_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    return outcome_;
  }

 private:
  // Reads what is ready on either pipe, waiting at most `wait_ms` for the first byte.
  void read_ready(int wait_ms) {
    for (pollfd& fd : fds_) fd.revents = 0;
    if (poll(fds_.data(), fds_.size(), wait_ms) <= 0) return;
    std::array<char, 65536> buffer{};
    for (size_t i = 0; i < fds_.size(); ++i) {
      if (fds_[i].fd < 0 || (fds_[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = read(fds_[i].fd, buffer.data(), buffer.size());
      if (n <= 0) {
        close(fds_[i].fd);
        fds_[i].fd = -1;  // poll ignores it from now on
        continue;
      }
      if (i == 1) {  // stderr: its end says why the child failed, keep that
        outcome_.err.append(buffer.data(), static_cast<size_t>(n));
        if (outcome_.err.size() > limits_.max_stderr_bytes) {
          outcome_.err.erase(0, outcome_.err.size() - limits_.max_stderr_bytes);
        }
      } else if (outcome_.out.size() + static_cast<size_t>(n) > limits_.max_stdout_bytes) {
        outcome_.out.append(buffer.data(), limits_.max_stdout_bytes - outcome_.out.size());
        outcome_.stdout_overflow = true;
      } else {
        outcome_.out.append(buffer.data(), static_cast<size_t>(n));
      }
    }
  }

  pid_t pid_;
  const ChildLimits& limits_;
  std::array<pollfd, 2> fds_;
  ChildOutcome outcome_;
};

}  // namespace

Result<ChildOutcome> run_bounded(const std::vector<std::string>& argv, const ChildLimits& limits) {
  std::array<int, 2> out_pipe{};
  std::array<int, 2> err_pipe{};
  if (pipe2(out_pipe.data(), O_CLOEXEC) != 0) return Status::io(std::string("pipe: ") + std::strerror(errno));
  if (pipe2(err_pipe.data(), O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Status::io(std::string("pipe: ") + std::strerror(errno));
  }
  std::vector<char*> args;  // built before fork: the child may not allocate
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::string mark = new_descendant_mark();
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  env.push_back(mark.data());
  env.push_back(nullptr);
  // Refused by the kernel, the group kill still ends all that stays in the group.
  if (limits.end_escaped_descendants) (void)become_subreaper();
  const pid_t pid = fork();
  if (pid == 0) exec_child(args.data(), env.data(), out_pipe[1], err_pipe[1], limits);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (pid < 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    return Status::runtime(std::string("fork: ") + std::strerror(errno));
  }
  setpgid(pid, pid);  // also here: kill(-pid) must find the group whoever runs first
  // Read before the child can end: it stays at least a zombie until reaped below.
  const unsigned long long child_start = limits.end_escaped_descendants ? start_time_of(pid) : ULLONG_MAX;
  ChildOutcome outcome = Collector(pid, out_pipe[0], err_pipe[0], limits).run();
  if (limits.end_escaped_descendants) end_escaped_children(mark, child_start);
  return outcome;
}

}  // namespace headroom::cli
