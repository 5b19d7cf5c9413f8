// How a published figure is read: which quantity a memory figure is (allocated,
// active, reserved, nvidia-smi), in which unit (GB = 1e9 bytes, GiB = 2^30), and
// which quantity a time figure is (per-GPU tokens/s, whole-job samples/s, step
// seconds). Where the source states it, the bench reads it from the case's own
// text; where the source leaves it open, the translation must state an
// assumption and why, and an assumption for what the source states is refused.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/accuracy/accuracy_inputs.h"
#include "graph/status.h"

namespace headroom::bench {

// `memory`: the case's measured.memory object. `reading`: the translation's
// memory_reading object, or null. `origin`: "FILE: ID" for messages.
Result<MeasuredMemory> read_measured_memory(const nlohmann::json& memory, int n_gpus,
                                            const nlohmann::json* reading,
                                            std::string_view case_origin,
                                            std::string_view translation_origin);

// `time`: the case's measured.time object. `reading`: the translation's
// time_reading object ({"tokens_per_s": "job", "why": ...}), or null; it is
// accepted only where the case's unknowns leave per GPU vs whole job open.
// Nullopt when the case holds no quantity the bench compares (for example only
// an MFU); an error when a throughput does not say whether it is per GPU.
Result<std::optional<MeasuredTime>> read_measured_time(const nlohmann::json& time,
                                                       const nlohmann::json* reading,
                                                       const std::vector<std::string>& unknowns,
                                                       std::string_view case_origin,
                                                       std::string_view translation_origin);

}  // namespace headroom::bench
