#include "cli/mmengine_loader.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "graph/atomic_file.h"
#include "graph/json_text.h"
#include "planner/configs/config_import.h"

namespace headroom::cli {
namespace {

// The largest dump read back; real configs print a few tens of kB.
constexpr size_t kMaxOutputBytes = size_t{16} << 20;

struct Finished {
  int exit_code = -1;  // -1: killed by a signal
  std::string out;
  std::string err;
};

// Runs argv[0] with argv, stdin closed, and collects both output streams
// (polled together so that neither pipe can fill up and stall the child).
Result<Finished> run_collecting(const std::vector<std::string>& argv) {
  int out_pipe[2];
  int err_pipe[2];
  if (pipe(out_pipe) != 0) return Status::io(std::string("pipe: ") + std::strerror(errno));
  if (pipe(err_pipe) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Status::io(std::string("pipe: ") + std::strerror(errno));
  }
  const pid_t pid = fork();
  if (pid < 0) return Status::runtime(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    close(out_pipe[0]);
    close(err_pipe[0]);
    close(out_pipe[1]);
    close(err_pipe[1]);
    close(STDIN_FILENO);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    const std::string message = "cannot start " + argv[0] + ": " + std::strerror(errno) + "\n";
    (void)!write(STDERR_FILENO, message.data(), message.size());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  Finished done;
  std::array<pollfd, 2> fds = {pollfd{out_pipe[0], POLLIN, 0}, pollfd{err_pipe[0], POLLIN, 0}};
  std::array<std::string*, 2> sinks = {&done.out, &done.err};
  int open_fds = 2;
  char buffer[65536];
  while (open_fds > 0) {
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0 && sinks[i]->size() < kMaxOutputBytes) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      } else if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  done.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return done;
}

std::string first_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  return line.empty() ? text : line;
}

}  // namespace

std::string mmengine_python() {
  if (const char* python = std::getenv("HEADROOM_PYTHON"); python != nullptr && *python != '\0') return python;
  const std::filesystem::path venv = std::filesystem::path(HEADROOM_SOURCE_DIR) / ".venv" / "bin" / "python";
  std::error_code error;
  if (std::filesystem::exists(venv, error)) return venv.string();
  return "python3";
}

Result<nlohmann::json> read_mmengine_config(const std::string& config_py) {
  const std::string script = std::string(HEADROOM_SOURCE_DIR) + "/scripts/exporter/read_mmengine_config.py";
  const std::string python = mmengine_python();
  Result<Finished> run = run_collecting({python, script, config_py});
  if (!run.is_ok()) return run.status().with_prefix(config_py + ": ");
  const Finished& done = run.value();
  if (done.exit_code != 0) {
    std::string why = first_line(done.err);
    if (why.empty()) why = "the loader (" + python + " " + script + ") failed without a message";
    if (done.exit_code == 3 || done.exit_code == 127) {
      why += " (set HEADROOM_PYTHON to a Python with mmengine, or give the JSON the loader prints)";
    }
    // The loader names the file itself; do not name it twice. Exit 3 (no
    // mmengine) and 127 (no Python) say this machine cannot load it; anything
    // else is a config MMEngine refused.
    const bool no_loader = done.exit_code == 3 || done.exit_code == 127;
    return Status::with_code(no_loader ? StatusCode::kUnsupported : StatusCode::kInvalidInput,
                             why.rfind(config_py, 0) == 0 ? why : config_py + ": " + why);
  }
  // The shared parse: its depth limit holds for what a config's code prints too.
  Result<nlohmann::json> dump = graph::parse_json_text(done.out, config_py + ": the MMEngine loader's output");
  return dump;
}

Result<nlohmann::json> read_mmengine_file(const std::string& path) {
  if (path.ends_with(".py")) return read_mmengine_config(path);
  Result<std::string> text = graph::read_file(path, planner::kMaxConfigFileBytes);
  if (!text.is_ok()) return text.status();
  Result<nlohmann::json> dump = graph::parse_json_text(text.value(), path);
  if (!dump.is_ok()) {
    return dump.status().with_suffix(" (expected an MMEngine config .py, or the JSON "
                                     "scripts/exporter/read_mmengine_config.py prints)");
  }
  return dump;
}

}  // namespace headroom::cli
