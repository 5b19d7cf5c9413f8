// Validation of RunSettings, whichever path they arrive by (flags, a settings
// file, an importer, a plan): above settings/stack.h, since which combinations
// are valid depends on what the stack does.
#pragma once

#include <string_view>

#include "graph/status.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// Checks every setting against its range (one table row per setting) and the
// combinations: param offload and NVMe offload need ZeRO-3 (as DeepSpeed
// refuses them), micro_batch x grad_accum x GPUs within kMaxGlobalBatch. The
// message names `origin` ("command line", a file), the field, the range and
// the value.
Status validate_settings(const RunSettings& settings, std::string_view origin);

}  // namespace headroom::planner
