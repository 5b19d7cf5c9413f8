// fnmatch-style globs over module and parameter names (--train, --freeze, lora_skip,
// scoped LoRA's scope): what trainability.cc and peft_param_wrapper.cc both match by.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace headroom::planner {

// fnmatch-style glob on a module or parameter name.
bool name_matches(std::string_view pattern, std::string_view name);

// Whether any of `patterns` matches `name`.
bool any_name_matches(const std::vector<std::string>& patterns, std::string_view name);

}  // namespace headroom::planner
