#include "cli/rank_launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>

namespace headroom::cli {
namespace {

// A TCP port on the loopback that nothing listens on now (the kernel's pick),
// for rank 0's store.
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  return port;
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
                                  strsignal(WTERMSIG(status)) + ")";
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

// In a rank, right after fork: it is killed when the launcher ends, however it
// ends (SIGKILL, SIGTERM, SIGHUP, a crash), rather than training on as an
// orphan beside the next job in the same checkpoint directory (issue 37). The
// signal survives execv. A launcher already gone before prctl took effect is
// caught by the parent check.
void die_with_launcher(pid_t launcher) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(exit_status(StatusCode::kRuntime));
}

// In rank `r`, after fork: the torchrun environment for one node of `nproc`
// ranks meeting on the loopback at `port`, then the trainer itself.
[[noreturn]] void exec_rank(const std::string& executable, const std::vector<std::string>& arguments, int nproc,
                            int r, int port, pid_t launcher) {
  die_with_launcher(launcher);
  const std::string world = std::to_string(nproc);
  const std::string rank = std::to_string(r);
  const std::string master_port = std::to_string(port);
  const std::string launcher_pid = std::to_string(launcher);
  ::setenv("RANK", rank.c_str(), 1);
  ::setenv("LOCAL_RANK", rank.c_str(), 1);
  ::setenv("WORLD_SIZE", world.c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", world.c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", master_port.c_str(), 1);
  ::setenv(kLauncherPidVariable, launcher_pid.c_str(), 1);
  std::vector<std::string> copy = arguments;
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(executable.c_str()));
  for (std::string& argument : copy) argv.push_back(argument.data());
  argv.push_back(nullptr);
  ::execv(executable.c_str(), argv.data());
  std::fprintf(stderr, "headroom: --nproc: cannot start rank %d (%s): %s\n", r, executable.c_str(),
               std::strerror(errno));
  ::_exit(exit_status(StatusCode::kRuntime));
}

// Forks the `nproc` ranks into `ranks`, in rank order. A failed fork kills and
// reaps those already started.
Status start_ranks(const std::string& executable, const std::vector<std::string>& arguments, int nproc, int port,
                   std::vector<pid_t>& ranks) {
  const pid_t launcher = ::getpid();
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      const Status failed = Status::runtime("--nproc: cannot start rank " + std::to_string(r) +
                                            ": " + std::strerror(errno));
      for (pid_t started : ranks) ::kill(started, SIGKILL);
      for (pid_t started : ranks) ::waitpid(started, nullptr, 0);
      return failed;
    }
    if (pid == 0) exec_rank(executable, arguments, nproc, r, port, launcher);
    ranks.push_back(pid);
  }
  return Status::ok();
}

// The rank whose process `done` was, marked ended in `ranks`; -1 when none was.
int take_rank(std::vector<pid_t>& ranks, pid_t done) {
  int rank = -1;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r] == done) {
      rank = static_cast<int>(r);
      ranks[r] = -1;
    }
  }
  return rank;
}

// Waits for every rank. The first to fail decides the exit code and stops the
// job: the others get kRankGraceSeconds to end, then are killed.
int wait_for_ranks(std::vector<pid_t>& ranks, int nproc, int grace_s, Terminal& terminal) {
  int exit_code = kExitOk;
  size_t running = ranks.size();
  bool stopping = false;  // a rank failed: waiting out the others
  std::chrono::steady_clock::time_point deadline{};
  while (running > 0) {
    int status = 0;
    const pid_t done = ::waitpid(-1, &status, stopping ? WNOHANG : 0);
    if (done < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (done == 0) {  // waiting out the others after a failure
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t pid : ranks) {
          if (pid > 0) ::kill(pid, SIGKILL);
        }
        terminal.err << "headroom: --nproc: the other ranks did not stop within " << grace_s
                     << " s of the failure (--comm-timeout plus " << kRankGraceSeconds << " s); killed\n";
        stopping = false;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      continue;
    }
    const int rank = take_rank(ranks, done);
    if (rank < 0) continue;
    --running;
    const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (failed && exit_code == kExitOk) {
      // A rank's exit status was decided by its own error's kind; a signal is a runtime failure.
      exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : exit_status(StatusCode::kRuntime);
      terminal.err << "headroom: rank " << rank << " of " << nproc << " " << describe(status)
                   << "; the job stops\n";
      stopping = true;
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(grace_s);
    }
  }
  return exit_code;
}

}  // namespace

int launch_local_ranks(const std::string& executable, const std::vector<std::string>& arguments, int nproc,
                       int comm_timeout_s, Terminal& terminal) {
  const int port = free_loopback_port();
  if (port < 0) {
    return fail(terminal,
                Status::runtime(
                    std::string("--nproc: no free TCP port on 127.0.0.1 for the ranks to meet: ") +
                    std::strerror(errno)));
  }
  terminal.out.flush();
  terminal.err.flush();
  std::cout.flush();
  std::cerr.flush();
  std::vector<pid_t> ranks;
  if (Status started = start_ranks(executable, arguments, nproc, port, ranks); !started.is_ok()) {
    return fail(terminal, started);
  }
  return wait_for_ranks(ranks, nproc, comm_timeout_s + kRankGraceSeconds, terminal);
}

}  // namespace headroom::cli
