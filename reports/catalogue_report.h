// Text and JSON listings of what headroom knows: the GPU catalogue (`headroom
// gpus`) and the model zoo (`headroom models`). Pure functions, no printing.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "planner/settings/hardware.h"

namespace headroom::reports {

// One zoo model as `headroom models` lists it.
struct ModelSummary {
  std::string name;
  std::string description;
  int64_t parameters = 0;  // all parameters, tied weights once
  std::string error;       // non-empty when its graph could not be built
};

std::string gpus_table(const std::vector<planner::GpuSpec>& gpus);
std::string models_table(const std::vector<ModelSummary>& models);

// One catalogue entry with every figure, bytes and GB/s as in GpuSpec.
nlohmann::json gpu_to_json(const planner::GpuSpec& gpu);
// {"command": "gpus", "gpus": [...]} and {"command": "models", "models": [...]}.
nlohmann::json gpus_to_json(const std::vector<planner::GpuSpec>& gpus);
nlohmann::json models_to_json(const std::vector<ModelSummary>& models);

}  // namespace headroom::reports
