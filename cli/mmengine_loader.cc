#include "cli/mmengine_loader.h"

#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "cli/bounded_child.h"
#include "cli/interpreter_check.h"
#include "cli/mmengine_loader_script.h"
#include "graph/atomic_file.h"
#include "graph/json_text.h"
#include "planner/configs/config_import.h"

namespace headroom::cli {
namespace {

// Real configs are a few kB of Python (the rest comes from their _base_ files):
// 4 MB of `x = 1` took the loader 60 s and 1.7 GB (issue 37).
constexpr int64_t kMaxConfigCodeBytes = int64_t{1} << 20;
constexpr int64_t kDefaultTimeoutSeconds = 60;
// Python with mmengine (and, in a non-lazy config, torch: about 3 GB of address
// space for `import torch`) fits with room to spare.
constexpr int64_t kDefaultMemoryMib = 8192;
// What the loader says when it cannot import mmengine (scripts/exporter/read_mmengine_config.py),
// before the config runs; the config exiting with status 3 is not that.
constexpr const char* kNoMmengineMessage = ": reading an MMEngine config needs mmengine (";
// The longest line of the loader's stderr a message repeats.
constexpr size_t kMaxShownErrorChars = 300;

// A positive integer from the environment variable `name`, or `fallback`.
Result<int64_t> limit_from_environment(const char* name, int64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text, &end, 10);
  if (errno != 0 || *end != '\0' || value <= 0) {
    return Status::invalid_input(std::string(name) + "=" + text + ": expected a positive whole number");
  }
  return static_cast<int64_t>(value);
}

std::atomic<bool> end_escaped{false};  // end_escaped_config_children()

Result<ChildLimits> loader_limits() {
  Result<int64_t> seconds = limit_from_environment("HEADROOM_CONFIG_TIMEOUT_S", kDefaultTimeoutSeconds);
  if (!seconds.is_ok()) return seconds.status();
  Result<int64_t> mib = limit_from_environment("HEADROOM_CONFIG_MEMORY_MIB", kDefaultMemoryMib);
  if (!mib.is_ok()) return mib.status();
  ChildLimits limits;
  limits.timeout_ms = seconds.value() * 1000;
  limits.address_space_bytes = mib.value() << 20;
  limits.end_escaped_descendants = end_escaped.load();
  return limits;
}

// The config must be a regular file of code, not too large to be one.
Status check_config_file(const std::string& config_py) {
  struct stat info {};
  if (::stat(config_py.c_str(), &info) != 0) {
    return Status::invalid_input(config_py + ": " + std::strerror(errno) + " (expected an MMEngine config .py)");
  }
  if (!S_ISREG(info.st_mode)) {
    return Status::invalid_input(config_py + ": not a regular file (expected an MMEngine config .py)");
  }
  if (info.st_size > kMaxConfigCodeBytes) {
    return Status::invalid_input(config_py + ": " + std::to_string(info.st_size) +
                                 " bytes; expected an MMEngine config of at most 1 MiB");
  }
  return Status::ok();
}

// The line of the loader's stderr that says why: its last, which is the
// loader's own one-line message or a Python traceback's exception, after
// whatever the config itself printed; cut.
std::string error_line(const std::string& text) {
  const size_t end = text.find_last_not_of("\r\n");
  if (end == std::string::npos) return "";
  const size_t start = text.find_last_of('\n', end);
  const size_t first = start == std::string::npos ? 0 : start + 1;
  const std::string line = text.substr(first, end - first + 1);
  return line.size() <= kMaxShownErrorChars ? line : line.substr(0, kMaxShownErrorChars - 3) + "...";
}

// Why the loader gave no JSON, as one message naming the file.
Status loader_failure(const std::string& config_py, const std::string& python, const ChildOutcome& done,
                      const ChildLimits& limits) {
  const std::string seconds = std::to_string(limits.timeout_ms / 1000);
  const std::string mib = std::to_string(limits.address_space_bytes >> 20);
  if (done.timed_out) {
    return Status::invalid_input(config_py + ": the config (Python code) ran longer than " + seconds +
                                 " s and was stopped; expected a config that loads in time (HEADROOM_CONFIG_TIMEOUT_S "
                                 "raises the limit)");
  }
  if (done.stdout_overflow) {
    return Status::invalid_input(config_py + ": the MMEngine loader printed more than " +
                                 std::to_string(limits.max_stdout_bytes >> 20) +
                                 " MiB and was stopped; expected a config of plain values");
  }
  std::string why = error_line(done.err);
  if (done.exit_code < 0) why = "the loader was ended by signal " + std::to_string(done.term_signal);
  if (why.empty()) {
    // The loader says why whenever it fails itself; silence is the config ending it (os._exit).
    why = "the loader (" + python + ") exited with status " + std::to_string(done.exit_code) +
          " without a message (the config's code may have ended it, as os._exit does)";
  }
  if (done.err.find("MemoryError") != std::string::npos || done.exit_code < 0) {
    why += " (the loader runs with " + mib + " MiB of address space; HEADROOM_CONFIG_MEMORY_MIB raises it)";
  }
  // Only the loader's own message says mmengine is missing (a config may exit 3 itself).
  const bool no_loader = done.exit_code == 127 || (done.exit_code == 3 && why.find(kNoMmengineMessage) != std::string::npos);
  if (no_loader) why += " (set HEADROOM_PYTHON to a Python with mmengine, or give the JSON the loader prints)";
  // The loader names the file itself; do not name it twice.
  return Status::with_code(no_loader ? StatusCode::kUnsupported : StatusCode::kInvalidInput,
                           why.rfind(config_py, 0) == 0 ? why : config_py + ": " + why);
}

Result<nlohmann::json> run_loader(const std::string& config_py) {
  if (Status file = check_config_file(config_py); !file.is_ok()) return file;
  Result<ChildLimits> limits = loader_limits();
  if (!limits.is_ok()) return limits.status();
  const std::string python = mmengine_python();
  if (Status safe = check_not_writable_by_others(python); !safe.is_ok()) return safe.with_prefix("MMEngine loader: ");
  Result<ChildOutcome> run = run_bounded({python, "-c", kMmengineLoaderScript, config_py}, limits.value());
  if (!run.is_ok()) return run.status().with_prefix(config_py + ": ");
  if (run->exit_code != 0 || run->timed_out || run->stdout_overflow) {
    return loader_failure(config_py, python, run.value(), limits.value());
  }
  // The shared parse: its depth limit holds for what a config's code prints too.
  return graph::parse_json_text(run->out, config_py + ": the MMEngine loader's output");
}

// The configs read in this process, by file identity: each runs once.
using ConfigKey = std::tuple<std::string, dev_t, ino_t, int64_t, int64_t>;
std::mutex loaded_mutex;
std::map<ConfigKey, Result<nlohmann::json>>& loaded_configs() {
  static std::map<ConfigKey, Result<nlohmann::json>> loaded;
  return loaded;
}

}  // namespace

Result<nlohmann::json> read_mmengine_config(const std::string& config_py) {
  struct stat info {};
  if (::stat(config_py.c_str(), &info) != 0) return run_loader(config_py);  // its message
  const ConfigKey key{config_py, info.st_dev, info.st_ino, info.st_size,
                      int64_t{info.st_mtim.tv_sec} * 1'000'000'000 + info.st_mtim.tv_nsec};
  const std::lock_guard<std::mutex> lock(loaded_mutex);
  auto found = loaded_configs().find(key);
  if (found == loaded_configs().end()) found = loaded_configs().emplace(key, run_loader(config_py)).first;
  return found->second;
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

void end_escaped_config_children() { end_escaped = true; }

void forget_mmengine_configs() {
  const std::lock_guard<std::mutex> lock(loaded_mutex);
  loaded_configs().clear();
}

}  // namespace headroom::cli
