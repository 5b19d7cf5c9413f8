// RunSettings' JSON form (docs/cli-json.md, "settings"): written with every
// setting that changes the price, read strictly (unknown keys refused) and
// validated (settings/validate_settings.h).
#pragma once

#include <string_view>

#include "graph/status.h"
#include "planner/settings/run_settings.h"
#include <nlohmann/json_fwd.hpp>

namespace headroom::planner {

nlohmann::json settings_to_json(const RunSettings& settings);
Result<RunSettings> settings_from_json(const nlohmann::json& json, std::string_view origin);

}  // namespace headroom::planner
