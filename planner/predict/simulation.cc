#include "planner/predict/simulation.h"

#include <nlohmann/json.hpp>

namespace headroom::planner {

std::string_view stream_name(Stream stream) {
  switch (stream) {
    case Stream::kCompute: return "compute";
    case Stream::kCopyOut: return "copy out";
    case Stream::kCopyIn: return "copy in";
    case Stream::kComm: return "comm";
    case Stream::kCpu: return "cpu";
  }
  return "?";
}

std::string_view phase_name(Phase phase) {
  switch (phase) {
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kRecompute: return "recompute";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kOffload: return "offload";
    case Phase::kComm: return "comm";
  }
  return "?";
}

nlohmann::json simulation_to_json(const Simulation& s, bool with_events) {
  nlohmann::json j;
  j["peak_allocated_bytes"] = s.peak_allocated;
  j["peak_live_bytes"] = s.peak_live;
  j["peak_reserved_bytes"] = s.peak_reserved;
  j["cuda_context_bytes"] = s.cuda_context;
  j["gpu_total_bytes"] = s.peak_reserved + s.cuda_context;
  j["peak_time_ms"] = s.peak_time_ms;
  j["peak_at"] = s.peak_label;
  j["segments_at_peak"] = s.segments_at_peak;
  j["allocations"] = s.allocations;
  j["steps_simulated"] = s.steps_simulated;
  j["reserved_still_growing"] = s.reserved_still_growing;
  j["first_step_peak_allocated_bytes"] = s.first_step_peak_allocated;
  j["first_step_peak_reserved_bytes"] = s.first_step_peak_reserved;
  if (s.varied_length_micro_steps > 0) {
    j["varied_length_micro_steps"] = s.varied_length_micro_steps;
    j["varied_peak_reserved_bytes"] = s.varied_peak_reserved;
    j["varied_peak_allocated_bytes"] = s.varied_peak_allocated;
    j["varied_out_of_memory"] = s.varied_out_of_memory;
  }
  j["out_of_memory"] = s.out_of_memory;
  if (s.out_of_memory) j["out_of_memory_at"] = s.out_of_memory_at;
  nlohmann::json live = nlohmann::json::array();
  for (const LiveItem& item : s.live_at_peak) live.push_back({{"name", item.name}, {"bytes", item.bytes}});
  j["live_at_peak"] = live;
  const TimeBreakdown& t = s.time;
  j["time"] = {{"forward_ms", t.forward_ms},     {"backward_ms", t.backward_ms},
               {"recompute_ms", t.recompute_ms}, {"offload_exposed_ms", t.offload_exposed_ms},
               {"comm_exposed_ms", t.comm_exposed_ms}, {"optimizer_ms", t.optimizer_ms},
               {"paged_migration_ms", t.paged_migration_ms},
               {"step_ms", t.step_ms},           {"samples_per_s", t.samples_per_s},
               {"tokens_per_s", t.tokens_per_s}, {"mfu", t.mfu}};
  nlohmann::json memory = nlohmann::json::array();
  for (const MemorySample& m : s.memory) {
    memory.push_back({{"time_ms", m.time_ms}, {"allocated_bytes", m.allocated}, {"reserved_bytes", m.reserved}, {"label", m.label}});
  }
  j["memory"] = memory;
  if (with_events) {
    nlohmann::json events = nlohmann::json::array();
    for (const TimelineEvent& e : s.events) {
      events.push_back({{"stream", stream_name(e.stream)}, {"phase", phase_name(e.phase)}, {"start_ms", e.start_ms},
                        {"end_ms", e.end_ms}, {"micro_step", e.micro_step}, {"block", e.block}, {"label", e.label},
                        {"bytes", e.bytes}, {"flops", e.flops}});
    }
    j["events"] = events;
  }
  return j;
}

}  // namespace headroom::planner
