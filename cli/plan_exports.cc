#include "cli/plan_exports.h"

#include <algorithm>

#include "cli/recipe_exports.h"
#include "graph/atomic_file.h"
#include "reports/config_export.h"

namespace headroom::cli {

Result<PlanExports> build_exports(const std::vector<std::string>& requests, const SettingsFlags& flags,
                                  const planner::Plan& best) {
  PlanExports out;
  std::vector<std::string> recipe_notes;  // what the recipe exports' keys cannot say
  for (const std::string& request : requests) {
    const size_t equals = request.find('=');
    PlanExport item{request.substr(0, equals), equals == std::string::npos ? "" : request.substr(equals + 1), ""};
    if (item.kind == "deepspeed") {
      item.text = reports::deepspeed_config(best).dump(2) + "\n";
    } else if (item.kind == "accelerate" && !is_recipe_export(item.kind, flags)) {
      item.text = reports::accelerate_config_yaml(best);
    } else if (item.kind == "torch") {
      item.text = reports::torch_snippet(best);
    } else if (is_recipe_export(item.kind, flags)) {
      Result<std::string> patch = recipe_export(item.kind, flags, best, recipe_notes);
      if (!patch.is_ok()) return patch.status();
      item.text = patch.value();
    } else {
      return Status::invalid_input("--emit: unknown kind \"" + item.kind +
                                   "\" (expected deepspeed, accelerate, torch, torchtune, hf-args, "
                                   "axolotl, llamafactory, xtuner or mmengine, optionally =FILE)");
    }
    if (equals != std::string::npos && item.path.empty()) {
      return Status::invalid_input("--emit " + item.kind + "=: expected a file name after '='");
    }
    out.exports.push_back(std::move(item));
  }
  // DeepSpeed's notes go with its exports (and the accelerate and torch ones, which
  // share their caveats); the recipe exports bring their own.
  const bool deepspeed_family = std::any_of(out.exports.begin(), out.exports.end(), [&](const PlanExport& e) {
    return !is_recipe_export(e.kind, flags);
  });
  if (deepspeed_family) out.notes = reports::deepspeed_notes(best);
  out.notes.insert(out.notes.end(), recipe_notes.begin(), recipe_notes.end());
  return out;
}

std::vector<NamedFile> export_files(const std::vector<std::string>& requests) {
  std::vector<NamedFile> files;
  for (const std::string& request : requests) {
    const size_t equals = request.find('=');
    if (equals != std::string::npos) files.push_back({"--emit " + request.substr(0, equals), request.substr(equals + 1)});
  }
  return files;
}

Status write_export_files(const PlanExports& exports) {
  for (const PlanExport& item : exports.exports) {
    if (item.path.empty()) continue;
    if (Status written = graph::write_file_atomic(item.path, item.text); !written.is_ok()) {
      return written.with_prefix("--emit " + item.kind + ": ");
    }
  }
  return Status::ok();
}

void add_exports_to_document(const PlanExports& exports, nlohmann::json& document) {
  for (const PlanExport& item : exports.exports) {
    document["exports"][item.kind] = item.path.empty() ? item.text : item.path;
  }
  for (const std::string& note : exports.notes) document["notes"].push_back(note);
}

}  // namespace headroom::cli
