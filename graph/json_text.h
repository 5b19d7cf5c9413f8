// JSON text to nlohmann::json for every file headroom reads: one parse, linear
// in the size of the text, that refuses what the readers must never see.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "graph/status.h"

namespace headroom::graph {

// The deepest JSON nesting accepted (a layer graph needs 5 levels): deeper
// documents would cost a deep recursion in every reader and destructor.
inline constexpr int kMaxJsonDepth = 64;

// Text to JSON. Errors start with `origin` and, where the document has one,
// the field path ("zero_optimization.stage", "steps[3].loss"):
// - a syntax error, with its byte offset, line and column;
// - nesting deeper than kMaxJsonDepth;
// - a duplicate key in one object (nlohmann would silently keep the last);
// - a number a double cannot hold (1e400).
Result<nlohmann::json> parse_json_text(std::string_view text, std::string_view origin);

}  // namespace headroom::graph
