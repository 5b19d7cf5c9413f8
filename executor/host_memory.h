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

// What a run needs of host memory before the trainer builds anything, in bytes.
struct RunHostNeed {
  int64_t build = 0;    // the module's fp32 weights: it is built on the CPU before it moves
  int64_t states = 0;   // a CPU run: everything the GPU would hold (the plan's peak allocated); 0 on a GPU
  int64_t offload = 0;  // what the plan offloads to host memory (optimizer states, activations)
};

// check_host_memory for a run, its parts named in the message. `available`
// 0: what the machine has (available_host_bytes); when that cannot be read,
// there is nothing to compare against and the run may go on.
Status check_run_host_memory(const RunHostNeed& need, int64_t available);

}  // namespace headroom::executor
