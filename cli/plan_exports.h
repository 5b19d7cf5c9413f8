// `plan --emit KIND[=FILE]`: the best plan as the files users launch with
// (DeepSpeed, Accelerate, torch: reports/config_export.h) or written back into
// the config the run was read from (cli/recipe_exports.h). Every requested
// export is built before any file is written, so a bad request writes nothing.
// Shared by the command line and the Python package (headroom.plan(emit=...)).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/output_guard.h"
#include "cli/settings_flags.h"
#include "graph/status.h"
#include "planner/predict/plan.h"

namespace headroom::cli {

struct PlanExport {
  std::string kind;  // deepspeed, accelerate, torch, torchtune, ...
  std::string path;  // FILE of KIND=FILE; empty: the text goes to the answer
  std::string text;
};

struct PlanExports {
  std::vector<PlanExport> exports;
  std::vector<std::string> notes;  // what the exports cannot say, placeholders to edit
};

// The exports `requests` asks for. Invalid input: an unknown kind, an empty
// FILE, a recipe export without the config it writes back into.
Result<PlanExports> build_exports(const std::vector<std::string>& requests, const SettingsFlags& flags,
                                  const planner::Plan& best);

// The FILEs the KIND=FILE requests name, each as "--emit KIND" (for
// refuse_outputs_over_inputs(), cli/output_guard.h).
std::vector<NamedFile> export_files(const std::vector<std::string>& requests);

// Writes the exports that name a FILE, each atomically.
Status write_export_files(const PlanExports& exports);

// The answer's "exports" (kind -> the text, or the FILE it went to) and "notes".
void add_exports_to_document(const PlanExports& exports, nlohmann::json& document);

}  // namespace headroom::cli
