#include "executor/host_memory.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "graph/atomic_file.h"

namespace headroom::executor {
namespace {

std::optional<int64_t> leading_integer(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data() || value < 0) return std::nullopt;
  return value;
}

// A cgroup v2 file with one number ("max" for no limit).
std::optional<int64_t> cgroup_value(const std::string& path) {
  Result<std::string> text = graph::read_file(path, 4096);
  if (!text.is_ok()) return std::nullopt;
  return leading_integer(text.value());
}

std::string gib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  return text;
}

}  // namespace

std::optional<int64_t> mem_available_bytes(std::string_view meminfo) {
  constexpr std::string_view kKey = "MemAvailable:";
  for (size_t start = 0; start < meminfo.size();) {
    size_t end = meminfo.find('\n', start);
    if (end == std::string_view::npos) end = meminfo.size();
    const std::string_view line = meminfo.substr(start, end - start);
    if (line.substr(0, kKey.size()) == kKey) {
      const std::optional<int64_t> kib = leading_integer(line.substr(kKey.size()));
      if (!kib || *kib > (INT64_MAX >> 10)) return std::nullopt;
      return *kib << 10;
    }
    start = end + 1;
  }
  return std::nullopt;
}

Result<int64_t> available_host_bytes() {
  Result<std::string> meminfo = graph::read_file("/proc/meminfo", 1 << 20);
  if (!meminfo.is_ok()) return meminfo.status();
  std::optional<int64_t> available = mem_available_bytes(meminfo.value());
  if (!available)
    return Status::unsupported(
        "/proc/meminfo: MemAvailable: missing (expected a Linux 3.14+ kernel)");
  const std::optional<int64_t> limit = cgroup_value("/sys/fs/cgroup/memory.max");
  const std::optional<int64_t> used = cgroup_value("/sys/fs/cgroup/memory.current");
  if (limit && used) *available = std::min(*available, std::max<int64_t>(0, *limit - *used));
  return *available;
}

Status check_host_memory(int64_t needed, int64_t available, const std::string& what) {
  if (needed <= available) return Status::ok();
  return Status::runtime(
      "host memory: " + what + " needs about " + gib(needed) + ", but " + gib(available) +
      " is available (MemAvailable, or the cgroup limit); nothing was built or trained. "
      "Expected a machine with more memory, or a plan that needs less (LoRA, a smaller model, "
      "a GPU for the model states)");
}

Status check_run_host_memory(const RunHostNeed& need, int64_t available) {
  if (available <= 0) {
    Result<int64_t> measured = available_host_bytes();
    if (!measured.is_ok()) return Status::ok();  // no /proc/meminfo: nothing to compare against
    available = measured.value();
  }
  return check_host_memory(need.build + need.states + need.offload, available,
                           "this plan (" + gib(need.build) + " of fp32 weights while the model is built" +
                               (need.states > 0 ? ", " + gib(need.states) + " of model states and activations on the CPU"
                                                : "") +
                               (need.offload > 0 ? ", " + gib(need.offload) + " offloaded to the host" : "") + ")");
}

}  // namespace headroom::executor
