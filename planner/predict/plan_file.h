// Plan files (`headroom plan -o`, `headroom fit -o`; docs/cli-json.md "Plan"):
// the one loader every command that reads a plan uses (simulate, report, run).
#pragma once

#include <string>

#include "graph/status.h"
#include "planner/predict/model_context.h"
#include "planner/predict/plan.h"

namespace headroom::planner {

inline constexpr int64_t kMaxPlanFileBytes = int64_t{64} << 20;

// Reads and validates a plan file: size-limited read, JSON (depth limit,
// duplicate keys refused), every field checked. Errors name the file and field.
Result<Plan> load_plan_file(const std::string& path);

// A plan made ready to replay: the model prepared from the plan's own settings
// (GPU included), the block decisions checked against the model's blocks, and
// the prediction recomputed (the file may come from an older headroom).
struct PreparedPlan {
  Plan plan;
  ModelContext context;
};
Result<PreparedPlan> prepare_plan(Plan plan, const std::string& origin);

// load_plan_file, then prepare_plan: a plan file read as simulate, report and
// run read it, so they refuse a bad one with the same message and code.
Result<PreparedPlan> load_prepared_plan(const std::string& path);

}  // namespace headroom::planner
