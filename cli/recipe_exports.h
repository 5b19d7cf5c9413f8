// `--emit torchtune|hf-args|axolotl|llamafactory|xtuner|accelerate`: the best plan written back into the
// config the run was read from (--torchtune, --hf-args, ...), as the keys to change
// (reports/recipe_export.h). The file is read again, alone, for what it says.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cli/settings_flags.h"
#include "graph/status.h"
#include "planner/predict/plan.h"

namespace headroom::cli {

// Whether `kind` is one of the recipe exports. `accelerate` is one when the run
// was read from --accelerate FILE (a patch of that file); without it, --emit
// accelerate writes a whole config (reports/config_export.h).
bool is_recipe_export(std::string_view kind, const SettingsFlags& flags);

// The export text for `kind`; its notes (what the keys cannot say) are appended
// to `notes`. An error when the run was not read from that kind of file.
Result<std::string> recipe_export(std::string_view kind, const SettingsFlags& flags, const planner::Plan& best,
                                  std::vector<std::string>& notes);

}  // namespace headroom::cli
