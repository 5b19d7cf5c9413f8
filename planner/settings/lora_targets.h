// PEFT's "all-linear" target shorthand as a LoRA target list holds it: one entry,
// resolved against the model graph by planner/mechanisms/all_linear.h.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace headroom::planner {

inline constexpr std::string_view kAllLinear = "all-linear";

// Whether `targets` is the shorthand (one entry, any case: PEFT lowers it).
bool is_all_linear(const std::vector<std::string>& targets);

}  // namespace headroom::planner
