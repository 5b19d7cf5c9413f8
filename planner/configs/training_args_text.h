// TrainingArguments as the text a user has: a shell command line (the launcher's
// words up to the script skipped) read into a JSON object of strings.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"

namespace headroom::planner {

// Splits a shell-style command line: whitespace outside quotes separates words,
// a backslash before a newline continues the line. `unclosed` (optional) is set
// when a quote is still open at the end, which a shell refuses.
std::vector<std::string> shell_words(std::string_view text, bool* unclosed = nullptr);

// HfArgumentParser's command line as a JSON object of strings: `--key value`,
// `--key=value`, a bare `--flag` (true), several words after one key joined by
// spaces (`--fsdp full_shard auto_wrap`). Words up to the script (the first
// word ending in .py, e.g. `torchrun --nproc_per_node 8 train.py`) are the
// launcher's and are skipped.
Result<nlohmann::json> arguments_object(std::string_view text, std::string_view origin);

}  // namespace headroom::planner
