// The host memory a run may use, checked before the trainer builds anything:
// a model larger than the machine's memory would otherwise be OOM-killed
// without a word (issue 14). Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "graph/status.h"

namespace headroom::executor {

// MemAvailable of /proc/meminfo's text, in bytes; nullopt when it is absent.
std::optional<int64_t> mem_available_bytes(std::string_view meminfo);

// Memory this process can still use: MemAvailable, capped by the cgroup v2
// limit (memory.max minus memory.current) where one is set.
Result<int64_t> available_host_bytes();

// Refuses `needed` bytes (`what` says of what) when `available` is less, with
// both figures and what to do.
Status check_host_memory(int64_t needed, int64_t available, const std::string& what);

}  // namespace headroom::executor
