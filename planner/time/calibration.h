// Calibration: measured figures for one GPU kind that replace the catalogue's
// defaults (efficiency of the time model, CUDA context size). Written by the
// executor after a run (`headroom run --write-calibration`), read with
// `--calibration FILE`. Format documented in docs/calibration.md.
#pragma once

#include <optional>
#include <string>

#include "graph/status.h"
#include "planner/time/block_profile.h"
#include <nlohmann/json_fwd.hpp>

namespace headroom::planner {

struct Calibration {
  std::string gpu;                            // catalogue id it was measured on
  std::optional<double> matmul_efficiency;    // fraction of peak tensor-core rate, (0, 1]
  std::optional<double> bandwidth_efficiency; // fraction of peak memory bandwidth, (0, 1]
  std::optional<int64_t> cuda_context_bytes;  // measured context + kernels outside the allocator
  std::string source;                         // what measured it: tool, GPU, driver, torch, date
};

nlohmann::json calibration_to_json(const Calibration& calibration);
Result<Calibration> calibration_from_json(const nlohmann::json& json, std::string_view origin);
Result<Calibration> load_calibration(const std::string& path);

// Applies a calibration to time-model options (only the fields it sets).
TimeModelOptions calibrated(const TimeModelOptions& defaults, const Calibration& calibration);

}  // namespace headroom::planner
