// A measured training run, to overlay on predictions: per-step peak allocated
// and reserved GPU memory and step time, and optionally a memory curve. The
// executor writes it (`headroom run`); format in docs/report.md. A planner-level
// value so that the executor (which writes it) and reports (which draw it) share it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/status.h"
#include <nlohmann/json_fwd.hpp>

namespace headroom::planner {

struct MeasuredStep {
  int step = 0;
  int64_t peak_allocated = 0;  // bytes, torch.cuda.max_memory_allocated over the step
  int64_t peak_reserved = 0;   // bytes, torch.cuda.max_memory_reserved over the step
  double step_ms = 0;
  double loss = 0;
};

struct MeasuredSample {
  double time_ms = 0;
  int64_t allocated = 0;
  int64_t reserved = 0;
};

struct MeasuredRun {
  std::string device;         // "NVIDIA RTX A6000" or "cpu"
  std::string driver;
  std::string torch_version;
  std::string date;
  std::vector<MeasuredStep> steps;
  std::vector<MeasuredSample> memory;  // optional curve of one step

  int64_t max_peak_reserved() const;
  int64_t max_peak_allocated() const;
  double median_step_ms() const;  // steps after the first (warm-up) when there are several
};

nlohmann::json measured_run_to_json(const MeasuredRun& run);
Result<MeasuredRun> measured_run_from_json(const nlohmann::json& json, std::string_view origin);
Result<MeasuredRun> load_measured_run(const std::string& path);

}  // namespace headroom::planner
