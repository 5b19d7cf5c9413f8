// Families that config.json names but headroom does not build, each with the reason and
// what to do instead, so that a refusal says more than "not in the list".
#pragma once

#include <optional>
#include <string>

namespace headroom::models {

// Why `model_type` is not built and what to do, or nullopt for a type this table
// does not know (the caller lists the supported ones).
std::optional<std::string> unsupported_family_reason(const std::string& model_type);

}  // namespace headroom::models
