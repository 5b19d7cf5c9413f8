// Which checkpointed block's input Unsloth's checkpointer sends to pinned host memory
// (unsloth_zoo 2026.8.13 gradient_checkpointing.py UnslothCheckpointFunction): every one
// but the last checkpointed block's ("Don't offload the last layer", LAST_GC_INDEX) and
// those of 2 MiB or less (MINIMUM_SIZE: `new_size > MINIMUM_SIZE`). The step walk
// (step_model.cc) and the simulator (step_simulator_offload.cc) both read it.
#pragma once

#include <cstdint>

namespace headroom::planner {

inline constexpr int64_t kUnslothMinimumOffloadBytes = 2 * 1024 * 1024;

inline bool unsloth_sends_input_to_host(bool checkpointed, bool last_checkpointed, int64_t input_bytes) {
  return checkpointed && !last_checkpointed && input_bytes > kUnslothMinimumOffloadBytes;
}

}  // namespace headroom::planner
