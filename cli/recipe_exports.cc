#include "cli/recipe_exports.h"

#include <algorithm>

#include "graph/atomic_file.h"
#include "planner/configs/accelerate_import.h"
#include "planner/configs/config_import.h"
#include "planner/configs/hf_trainer_import.h"
#include "planner/predict/model_context.h"
#include "planner/configs/torchtune_import.h"
#include "planner/configs/axolotl_import.h"
#include "planner/configs/llamafactory_import.h"
#include "planner/configs/mmengine_import.h"
#include "planner/configs/xtuner_import.h"
#include "cli/mmengine_loader.h"
#include "reports/accelerate_patch.h"
#include "reports/recipe_export.h"

namespace headroom::cli {
namespace {

// Per block of the plan's graph: whether it is a layer the recipe can checkpoint.
Result<std::vector<bool>> checkpointable_blocks(const planner::Plan& best) {
  Result<planner::ModelContext> context = planner::prepare_context(best.settings);
  if (!context.is_ok()) return context.status();
  std::vector<bool> out;
  for (const graph::Block& block : context->graph.blocks) out.push_back(block.checkpointable);
  return out;
}

// The XTuner write-back: the config read again (through MMEngine's loader for a
// .py), and the top-level variables that hold the dicts' values found in it.
Result<std::string> xtuner_export(const std::string& path, bool with_deepspeed, const planner::Plan& best,
                                  const std::vector<bool>& checkpointable, std::vector<std::string>& notes) {
  Result<nlohmann::json> dump = read_xtuner_config(path);
  if (!dump.is_ok()) return dump.status();
  // The config the loader read (for a .py, `path` itself).
  const std::string py_path = dump->value("file", "");
  Result<planner::ConfigImport> given =
      planner::import_xtuner_config(dump.value(), path, planner::RunSettings{}, with_deepspeed);
  if (!given.is_ok()) return given.status();
  const nlohmann::json& cfg = dump->at("config");
  const auto feeds = [&](const char* variable, const char* dict, const char* key) {
    return cfg.contains(variable) && cfg.contains(dict) && cfg.at(dict).is_object() && cfg.at(dict).contains(key) &&
           cfg.at(variable) == cfg.at(dict).at(key);
  };
  const reports::XtunerVariables variables{feeds("batch_size", "train_dataloader", "batch_size"),
                                           feeds("accumulative_counts", "optim_wrapper", "accumulative_counts")};
  // The .py text for the diff; without it (a dump whose file is elsewhere) the
  // --cfg-options alone say the keys.
  Result<std::string> py_text = py_path.empty()
                                    ? Result<std::string>(Status::invalid_input("no .py file"))
                                    : graph::read_file(py_path, planner::kMaxConfigFileBytes);
  const reports::RecipePatch patch =
      reports::xtuner_patch(best, given->settings, checkpointable, py_text.is_ok() ? py_text.value() : "",
                            py_path.empty() ? path : py_path,
                            py_text.is_ok() ? variables : reports::XtunerVariables{});
  notes.insert(notes.end(), patch.notes.begin(), patch.notes.end());
  return patch.text;
}

// The mmpretrain write-back: the config read again, and which of the plan's
// blocks with_cp=True checkpoints (the config read once more with it set: the
// reader knows which blocks' inputs need no gradient).
Result<std::string> mmpretrain_export(const std::string& path, const nlohmann::json& dump, const planner::Plan& best,
                                      std::vector<std::string>& notes) {
  Result<planner::ConfigImport> given = planner::import_mmengine_config(dump, path, planner::RunSettings{}, false);
  if (!given.is_ok()) return given.status();
  nlohmann::json with_cp = dump;
  with_cp["config"]["model"]["backbone"]["with_cp"] = true;
  Result<planner::ConfigImport> checkpointed = planner::import_mmengine_config(with_cp, path, planner::RunSettings{}, false);
  if (!checkpointed.is_ok()) return checkpointed.status();
  const planner::RunSettings& cp = checkpointed->settings;
  Result<planner::ModelContext> context = planner::prepare_context(best.settings);
  if (!context.is_ok()) return context.status();
  std::vector<bool> with_cp_blocks;
  for (const graph::Block& block : context->graph.blocks) {
    const bool listed = std::find(cp.checkpoint_blocks.begin(), cp.checkpoint_blocks.end(), block.name) !=
                        cp.checkpoint_blocks.end();
    with_cp_blocks.push_back(block.checkpointable && (cp.checkpointing == planner::CheckpointPolicy::kEveryBlock ||
                                                      (cp.checkpointing == planner::CheckpointPolicy::kList && listed)));
  }
  const std::string py_path = dump.value("file", "");
  const reports::RecipePatch patch =
      reports::mmengine_patch(best, given->settings, with_cp_blocks, py_path.empty() ? path : py_path);
  notes.insert(notes.end(), patch.notes.begin(), patch.notes.end());
  return patch.text;
}

// What every recipe exporter is given: the run's flags, the plan, the file the
// run was read from and which blocks can be checkpointed. Its notes go to `notes`.
struct ExportInput {
  const SettingsFlags& flags;
  const planner::Plan& best;
  const std::string& path;
  const std::vector<bool>& checkpointable;
  std::vector<std::string>& notes;
};

// The patch's text, its notes added to the export's.
std::string patch_text(const reports::RecipePatch& patch, std::vector<std::string>& notes) {
  notes.insert(notes.end(), patch.notes.begin(), patch.notes.end());
  return patch.text;
}

Result<std::string> torchtune_export(const ExportInput& in) {
  Result<std::string> text = graph::read_file(in.path, planner::kMaxConfigFileBytes);
  if (!text.is_ok()) return text.status();
  Result<planner::ConfigImport> given = planner::import_torchtune_config(
      text.value(), in.path, given_values(in.flags, "--torchtune-set"), planner::RunSettings{});
  if (!given.is_ok()) return given.status();
  return patch_text(reports::torchtune_patch(in.best, given->settings, in.checkpointable, text.value(), in.path,
                                             given_values(in.flags, "--torchtune-set")),
                    in.notes);
}

Result<std::string> axolotl_export(const ExportInput& in) {
  Result<std::string> text = graph::read_file(in.path, planner::kMaxConfigFileBytes);
  if (!text.is_ok()) return text.status();
  Result<planner::ConfigImport> given = planner::import_axolotl_config(text.value(), in.path, planner::RunSettings{});
  if (!given.is_ok()) return given.status();
  return patch_text(reports::axolotl_patch(in.best, given->settings, in.checkpointable, text.value(), in.path),
                    in.notes);
}

Result<std::string> llamafactory_export(const ExportInput& in) {
  Result<std::string> text = graph::read_file(in.path, planner::kMaxConfigFileBytes);
  if (!text.is_ok()) return text.status();
  Result<planner::ConfigImport> given =
      planner::import_llamafactory_config(text.value(), in.path, planner::RunSettings{});
  if (!given.is_ok()) return given.status();
  return patch_text(reports::llamafactory_patch(in.best, given->settings, in.checkpointable, text.value(), in.path),
                    in.notes);
}

Result<std::string> accelerate_export(const ExportInput& in) {
  Result<std::string> text = graph::read_file(in.path, planner::kMaxConfigFileBytes);
  if (!text.is_ok()) return text.status();
  Result<planner::ConfigImport> given =
      planner::import_accelerate_config(text.value(), in.path, planner::RunSettings{});
  if (!given.is_ok()) return given.status();
  Result<reports::RecipePatch> written =
      reports::accelerate_patch(in.best, given->settings, in.checkpointable, text.value(), in.path);
  if (!written.is_ok()) return written.status();
  return patch_text(written.value(), in.notes);
}

// Any MMEngine config: XTuner's are written back as --emit xtuner writes them.
Result<std::string> mmengine_export(const ExportInput& in) {
  Result<nlohmann::json> dump = read_mmengine_file(in.path);
  if (!dump.is_ok()) return dump.status();
  Result<planner::MmengineKind> config_kind = planner::mmengine_kind(dump.value(), in.path);
  if (!config_kind.is_ok()) return config_kind.status();
  if (config_kind.value() == planner::MmengineKind::kXtuner) {
    return xtuner_export(in.path, !given_values(in.flags, "--deepspeed").empty(), in.best, in.checkpointable,
                         in.notes);
  }
  return mmpretrain_export(in.path, dump.value(), in.best, in.notes);
}

Result<std::string> xtuner_flag_export(const ExportInput& in) {
  return xtuner_export(in.path, !given_values(in.flags, "--deepspeed").empty(), in.best, in.checkpointable, in.notes);
}

// Launched by `accelerate launch --config_file`, the Trainer's arguments
// refine that file's run, and ZeRO, offload and FSDP checkpointing are its keys.
Result<std::string> trainer_arguments_export(const ExportInput& in) {
  const std::vector<std::string> accelerate = given_values(in.flags, "--accelerate");
  planner::RunSettings base;
  if (!accelerate.empty()) {
    Result<planner::ConfigImport> launch = planner::load_accelerate_config(accelerate.back(), base);
    if (!launch.is_ok()) return launch.status();
    base = launch->settings;
  }
  Result<planner::ConfigImport> given = planner::load_training_arguments(in.path, base);
  if (!given.is_ok()) return given.status();
  return patch_text(reports::trainer_arguments_patch(in.best, given->settings, in.checkpointable, !accelerate.empty()),
                    in.notes);
}

// One row per --emit kind written back into the file its --KIND flag names.
struct RecipeExporter {
  std::string_view kind;
  Result<std::string> (*write)(const ExportInput&);
};
constexpr RecipeExporter kRecipeExporters[] = {
    {"torchtune", torchtune_export},
    {"hf-args", trainer_arguments_export},
    {"axolotl", axolotl_export},
    {"llamafactory", llamafactory_export},
    {"xtuner", xtuner_flag_export},
    {"accelerate", accelerate_export},
    {"mmengine", mmengine_export},
};

const RecipeExporter* find_exporter(std::string_view kind) {
  for (const RecipeExporter& row : kRecipeExporters) {
    if (row.kind == kind) return &row;
  }
  return nullptr;
}

}  // namespace

bool is_recipe_export(std::string_view kind, const SettingsFlags& flags) {
  if (kind == "accelerate") return !given_values(flags, "--accelerate").empty();
  return find_exporter(kind) != nullptr;
}

Result<std::string> recipe_export(std::string_view kind, const SettingsFlags& flags, const planner::Plan& best,
                                  std::vector<std::string>& notes) {
  const std::string flag = "--" + std::string(kind);
  const std::vector<std::string> files = given_values(flags, flag);
  if (files.empty()) {
    return Status::invalid_input(std::string("--emit ") + std::string(kind) +
                                 ": the keys to change in the file the run was read from (a patch to apply, never the "
                                 "file itself); expected " +
                                 flag + " FILE with it");
  }
  Result<std::vector<bool>> checkpointable = checkpointable_blocks(best);
  if (!checkpointable.is_ok()) return checkpointable.status();
  const ExportInput in{flags, best, files.back(), checkpointable.value(), notes};
  // Callers ask is_recipe_export first; any other kind is read as the Trainer's arguments.
  const RecipeExporter* exporter = find_exporter(kind);
  return exporter != nullptr ? exporter->write(in) : trainer_arguments_export(in);
}

}  // namespace headroom::cli
