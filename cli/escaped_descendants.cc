#include "cli/escaped_descendants.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>
#include <vector>

namespace headroom::cli {
namespace {

// Rounds of looking for re-parented orphans: an orphan appears when its parent
// has died, a little after the SIGKILL; rounds without one before stopping,
// and rounds at most.
constexpr int kQuietRounds = 10;
constexpr int kMaxRounds = 400;
constexpr auto kRoundPause = std::chrono::milliseconds(5);

// The whole of a /proc file, or what was read of it before an error: a process
// that exits while it is read makes read() fail with ESRCH, which
// std::filebuf's underflow turns into an exception whatever the stream's mask.
std::string read_proc_file(const std::string& path) {
  std::string text;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  std::array<char, 4096> buffer{};
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

// The fields of /proc/PID/stat after the command name (which may hold spaces
// and parentheses), from the state on; empty when unreadable.
std::vector<std::string> stat_fields(const std::string& pid) {
  const std::string stat = read_proc_file("/proc/" + pid + "/stat");
  const size_t close = stat.rfind(')');
  std::vector<std::string> fields;
  if (close == std::string::npos || close + 2 >= stat.size()) return fields;
  std::istringstream in(stat.substr(close + 2));
  for (std::string field; in >> field;) fields.push_back(field);
  return fields;
}

// proc(5): the parent is field 4 and the start time (clock ticks after boot)
// field 22; the state, field 3, is the first after the name.
constexpr size_t kParentField = 4 - 3;
constexpr size_t kStartTimeField = 22 - 3;

unsigned long long field_value(const std::vector<std::string>& fields, size_t index) {
  if (index >= fields.size()) return 0;
  return std::strtoull(fields[index].c_str(), nullptr, 10);
}

bool has_mark(pid_t pid, const std::string& mark) {
  std::istringstream in(read_proc_file("/proc/" + std::to_string(pid) + "/environ"));
  std::string entry;
  while (std::getline(in, entry, '\0')) {
    if (entry == mark) return true;
  }
  return false;
}

// This process's children that are the bounded child's descendants: marked,
// or started no earlier than it (one that cleared its environment before
// execve keeps no mark, but cannot be older than the child it came from).
std::vector<pid_t> escaped_children(const std::string& mark, unsigned long long child_start) {
  std::vector<pid_t> found;
  const auto self = static_cast<unsigned long long>(::getpid());
  std::error_code error;
  // Incremented with an error code: the range-for's ++ may throw while processes come and go.
  for (std::filesystem::directory_iterator it("/proc", error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::vector<std::string> fields = stat_fields(name);
    if (fields.empty() || field_value(fields, kParentField) != self) continue;
    const auto pid = static_cast<pid_t>(std::stol(name));
    if (field_value(fields, kStartTimeField) >= child_start || has_mark(pid, mark)) found.push_back(pid);
  }
  return found;
}

}  // namespace

std::string new_descendant_mark() {
  static std::atomic<int> runs{0};
  return "HEADROOM_BOUNDED_CHILD=" + std::to_string(::getpid()) + "-" + std::to_string(++runs);
}

bool become_subreaper() { return ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0; }

unsigned long long start_time_of(pid_t pid) {
  const std::vector<std::string> fields = stat_fields(std::to_string(pid));
  return fields.size() > kStartTimeField ? field_value(fields, kStartTimeField) : ULLONG_MAX;
}

void end_escaped_children(const std::string& mark, unsigned long long child_start) {
  int quiet = 0;
  for (int round = 0; round < kMaxRounds && quiet < kQuietRounds; ++round) {
    const std::vector<pid_t> children = escaped_children(mark, child_start);
    quiet = children.empty() ? quiet + 1 : 0;
    for (pid_t pid : children) ::kill(pid, SIGKILL);
    for (pid_t pid : children) {
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    if (children.empty()) std::this_thread::sleep_for(kRoundPause);
  }
}

}  // namespace headroom::cli
