// How vLLM's figures read in its refusals and notes (mechanisms/vllm_engine.cc,
// predict/vllm_share.cc): GiB to two places, a utilization to three, as TRL's
// vllm_gpu_memory_utilization is given.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace headroom::planner {

inline std::string vllm_gib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1LL << 30));
  return text;
}

inline std::string vllm_fraction(double value) {
  char text[16];
  std::snprintf(text, sizeof text, "%.3f", value);
  return text;
}

}  // namespace headroom::planner
