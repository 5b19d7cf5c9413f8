// A Plan written back into the user's Accelerate config (the YAML `accelerate
// config` writes and `accelerate launch --config_file` reads), as a unified
// diff of that file: the FSDP or DeepSpeed plugin keys the plan changes, a
// plugin block added where a DDP config needs sharding, every other line kept.
// Rules in docs/config-import.md ("Writing the plan back").
#pragma once

#include <string_view>
#include <vector>

#include "graph/status.h"
#include "planner/predict/plan.h"
#include "reports/recipe_export.h"

namespace headroom::reports {

// `given`: the run as the file says it (planner::import_accelerate_config);
// `checkpointable`: per plan block, whether it is a layer. Refused: a plugin
// block the file writes in flow style ({...}), which a line diff cannot edit.
Result<RecipePatch> accelerate_patch(const planner::Plan& plan, const planner::RunSettings& given,
                                     const std::vector<bool>& checkpointable, std::string_view yaml_text,
                                     std::string_view path);

}  // namespace headroom::reports
