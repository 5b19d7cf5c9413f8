#include "reports/recipe_export.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>

#include "planner/settings/stack.h"
#include "reports/line_edits.h"

namespace headroom::reports {
namespace {

using planner::BlockChoice;
using planner::CheckpointPolicy;
using planner::Offload;

std::string boolean(bool value, bool python_style) { return value ? (python_style ? "True" : "true") : (python_style ? "False" : "false"); }

void set_if_changed(RecipePatch& patch, const std::string& key, const std::string& now, const std::string& wanted) {
  if (now != wanted) patch.changes.emplace_back(key, wanted);
}

// The line after `key_line` that holds its value when the key's own line has
// none (`key:` then `  4`): the next non-blank, non-comment line, if it is
// indented and a plain scalar (no nested mapping or list).
std::optional<size_t> value_line_below(const std::vector<std::string>& lines, size_t key_line) {
  static const std::regex scalar(R"(^\s+[^\s#\-][^:#]*(\s+#.*)?$)");
  for (size_t i = key_line + 1; i < lines.size(); ++i) {
    const size_t first = lines[i].find_first_not_of(" \t");
    if (first == std::string::npos || lines[i][first] == '#') continue;
    if (std::regex_match(lines[i], scalar)) return i;
    return std::nullopt;
  }
  return std::nullopt;
}

// A unified diff of the top-level `key: value` lines of a YAML file: a changed
// value replaces its line (or the indented line below that holds it), keeping a
// trailing comment and the key's quotes; a key the file lacks is appended.
std::string yaml_diff(std::string_view text, std::string_view path,
                      const std::vector<std::pair<std::string, std::string>>& changes) {
  LineEdits edits(text);
  const std::vector<std::string>& lines = edits.lines();
  std::vector<std::string> appended;
  for (const auto& [key, value] : changes) {
    // The key as written: plain, "double" or 'single' quoted (issue 37: a quoted
    // key was appended a second time).
    const std::regex pattern("^(" + key + "|\"" + key + "\"|'" + key + R"('):\s*([^#]*?)(\s+#.*)?$)");
    bool found = false;
    for (size_t i = 0; i < lines.size() && !found; ++i) {
      std::smatch match;
      if (!std::regex_match(lines[i], match, pattern)) continue;
      found = true;
      const std::optional<size_t> below = match[2].str().empty() ? value_line_below(lines, i) : std::nullopt;
      if (below) {
        std::smatch value_match;
        static const std::regex indented(R"(^(\s+)[^#]*?(\s+#.*)?$)");
        std::regex_match(lines[*below], value_match, indented);
        edits.replace(*below, value_match[1].str() + value + value_match[2].str());
      } else {
        edits.replace(i, match[1].str() + ": " + value + match[3].str());
      }
    }
    if (!found) appended.push_back(key + ": " + value);
  }
  edits.insert_before(lines.size(), appended);
  return edits.unified_diff(path);
}

// A unified diff of top-level Python assignments `key = N` (an XTuner config's
// variables): a changed value replaces its line, keeping a trailing comment.
// Keys without such a line are left to --cfg-options.
std::string python_assignment_diff(std::string_view text, std::string_view path,
                                   const std::vector<std::pair<std::string, std::string>>& changes) {
  LineEdits edits(text);
  const std::vector<std::string>& lines = edits.lines();
  for (const auto& [key, value] : changes) {
    const std::regex pattern("^" + key + R"(\s*=\s*[0-9]+(\s*#.*)?$)");
    for (size_t i = 0; i < lines.size(); ++i) {
      std::smatch match;
      if (!std::regex_match(lines[i], match, pattern)) continue;
      edits.replace(i, key + " = " + value + match[1].str());
      break;
    }
  }
  return edits.unified_diff(path);
}

// The keys the Trainer-style recipes (axolotl, LLaMA-Factory) share, in their
// own spellings: the micro-batch, accumulation, all-or-nothing checkpointing
// (`checkpoint_off` names a key that is true when checkpointing is off) and
// the DeepSpeed config that ZeRO and offload need.
struct TrainerKeys {
  const char* micro_batch;
  const char* accumulation;
  const char* checkpointing;
  bool checkpoint_off;
};

RecipePatch trainer_style_patch(const planner::Plan& plan, const planner::RunSettings& given,
                                const std::vector<bool>& checkpointable, std::string_view yaml_text,
                                std::string_view path, const TrainerKeys& keys, const std::string& launch) {
  RecipePatch patch;
  const planner::GlobalConfig& c = plan.config;
  set_if_changed(patch, keys.micro_batch, std::to_string(given.micro_batch), std::to_string(c.micro_batch));
  set_if_changed(patch, keys.accumulation, std::to_string(given.grad_accum), std::to_string(c.grad_accum));
  const bool checkpoint = checkpoint_every_layer(layer_choices(plan, checkpointable), patch.notes, keys.checkpointing);
  const bool was = given.checkpointing != CheckpointPolicy::kNone;
  set_if_changed(patch, keys.checkpointing, boolean(keys.checkpoint_off ? !was : was, false),
                 boolean(keys.checkpoint_off ? !checkpoint : checkpoint, false));
  if (changes_deepspeed_config(c, given)) {
    patch.changes.emplace_back("deepspeed", "ds_config.json");
    patch.notes.push_back(deepspeed_config_note(c));
  }
  std::ostringstream text;
  if (patch.changes.empty()) {
    text << "# the config already runs the plan: no key to change\n";
  } else {
    text << "# " << launch << " " << path << " after this patch:\n" << yaml_diff(yaml_text, path, patch.changes);
  }
  patch.text = text.str();
  return patch;
}

}  // namespace

// Checkpointing as all-or-nothing recipes say it: every layer or none. A plan
// that checkpoints some layers, or offloads a layer's activations, is written
// as checkpointing every layer, which keeps less than the plan, and said.
bool checkpoint_every_layer(const LayerChoices& layers, std::vector<std::string>& notes, const std::string& key) {
  const int touched = layers.checkpointed + layers.offloaded;
  if (touched > 0 && touched < layers.layers) {
    notes.push_back(key + " checkpoints every layer or none: the plan checkpoints or offloads " +
                    std::to_string(touched) + " of " + std::to_string(layers.layers) +
                    " layers; every layer is written, which keeps less memory and recomputes more than the plan");
  }
  if (layers.offloaded > 0) {
    notes.push_back("the plan keeps " + std::to_string(layers.offloaded) +
                    " layers' activations in pinned CPU memory, which these keys cannot say; they are written as "
                    "checkpointed");
  }
  return touched > 0;
}

// ZeRO and offload are the DeepSpeed config's: whether the plan changes them,
// and the note that points at the export writing that config.
bool changes_deepspeed_config(const planner::GlobalConfig& c, const planner::RunSettings& given) {
  return c.zero_stage != given.zero_stage || c.offload_optimizer != given.offload_optimizer ||
         c.offload_param != given.offload_param;
}

std::string deepspeed_config_note(const planner::GlobalConfig& c) {
  return "ZeRO stage " + std::to_string(c.zero_stage) +
         " and offload are DeepSpeed's: write ds_config.json with --emit deepspeed=ds_config.json";
}

RecipePatch axolotl_patch(const planner::Plan& plan, const planner::RunSettings& given,
                          const std::vector<bool>& checkpointable, std::string_view yaml_text, std::string_view path) {
  return trainer_style_patch(plan, given, checkpointable, yaml_text, path,
                             {"micro_batch_size", "gradient_accumulation_steps", "gradient_checkpointing", false},
                             "axolotl train");
}

RecipePatch llamafactory_patch(const planner::Plan& plan, const planner::RunSettings& given,
                               const std::vector<bool>& checkpointable, std::string_view yaml_text,
                               std::string_view path) {
  // disable_gradient_checkpointing (model_args.py): checkpointing is on unless it is true.
  return trainer_style_patch(plan, given, checkpointable, yaml_text, path,
                             {"per_device_train_batch_size", "gradient_accumulation_steps",
                              "disable_gradient_checkpointing", true},
                             "llamafactory-cli train");
}

RecipePatch xtuner_patch(const planner::Plan& plan, const planner::RunSettings& given,
                         const std::vector<bool>& checkpointable, std::string_view py_text, std::string_view path,
                         XtunerVariables variable_feeds) {
  RecipePatch patch;
  const planner::GlobalConfig& c = plan.config;
  set_if_changed(patch, "train_dataloader.batch_size", std::to_string(given.micro_batch), std::to_string(c.micro_batch));
  set_if_changed(patch, "optim_wrapper.accumulative_counts", std::to_string(given.grad_accum),
                 std::to_string(c.grad_accum));
  const bool checkpoint =
      checkpoint_every_layer(layer_choices(plan, checkpointable), patch.notes, "model.use_activation_checkpointing");
  set_if_changed(patch, "model.use_activation_checkpointing",
                 boolean(given.checkpointing != CheckpointPolicy::kNone, true), boolean(checkpoint, true));
  const bool deepspeed = changes_deepspeed_config(c, given);
  if (deepspeed) patch.notes.push_back(deepspeed_config_note(c) + " and give it to xtuner train --deepspeed");
  std::ostringstream text;
  if (patch.changes.empty() && !deepspeed) {
    text << "# the config already runs the plan: no key to change\n";
    patch.text = text.str();
    return patch;
  }
  text << "# xtuner train " << path;
  if (!patch.changes.empty()) {
    text << " --cfg-options";
    for (const auto& [key, value] : patch.changes) text << " " << key << "=" << value;
  }
  if (deepspeed) text << " --deepspeed ds_config.json";
  text << "\n";
  // The same in the file, where a top-level variable feeds the key.
  std::vector<std::pair<std::string, std::string>> lines;
  for (const auto& [key, value] : patch.changes) {
    if (key == "train_dataloader.batch_size" && variable_feeds.batch_size) lines.emplace_back("batch_size", value);
    if (key == "optim_wrapper.accumulative_counts" && variable_feeds.accumulative_counts) {
      lines.emplace_back("accumulative_counts", value);
    }
  }
  if (!lines.empty()) {
    text << "# or in the file (its top-level variables feed those keys):\n"
         << python_assignment_diff(py_text, path, lines);
  }
  patch.text = text.str();
  return patch;
}

RecipePatch mmengine_patch(const planner::Plan& plan, const planner::RunSettings& given,
                           const std::vector<bool>& with_cp_blocks, std::string_view path) {
  RecipePatch patch;
  const planner::GlobalConfig& c = plan.config;
  set_if_changed(patch, "train_dataloader.batch_size", std::to_string(given.micro_batch), std::to_string(c.micro_batch));
  set_if_changed(patch, "optim_wrapper.accumulative_counts", std::to_string(given.grad_accum),
                 std::to_string(c.grad_accum));
  // Precision: AmpOptimWrapper autocasts (dtype float16 or bfloat16), OptimWrapper
  // trains in fp32 (mmengine/optim/optimizer/amp_optimizer_wrapper.py).
  const planner::Precision wanted = plan.settings.precision;
  if (wanted != given.precision) {
    if (planner::is_autocast(wanted)) {
      patch.changes.emplace_back("optim_wrapper.type", "AmpOptimWrapper");
      patch.changes.emplace_back("optim_wrapper.dtype", wanted == planner::Precision::kBf16Amp ? "bfloat16" : "float16");
    } else if (wanted == planner::Precision::kFp32) {
      patch.changes.emplace_back("optim_wrapper.type", "OptimWrapper");
      if (planner::is_autocast(given.precision)) patch.changes.emplace_back("optim_wrapper.dtype", "None");
    } else {
      patch.notes.push_back("precision " + std::string(planner::precision_name(wanted)) +
                            " has no MMEngine optimizer-wrapper key (AmpOptimWrapper autocasts an fp32 model)");
    }
  }
  // with_cp is all-or-nothing for the backbone: the blocks it checkpoints are
  // `with_cp_blocks`. Any block the plan checkpoints or offloads turns it on.
  int planned = 0;
  int differing = 0;
  int offloaded = 0;
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    const bool touched = plan.blocks[b] != BlockChoice::kKeep;
    const bool by_with_cp = b < with_cp_blocks.size() && with_cp_blocks[b];
    if (touched) ++planned;
    if (plan.blocks[b] == BlockChoice::kOffload) ++offloaded;
    if (touched != by_with_cp) ++differing;
  }
  const bool with_cp = planned > 0;
  set_if_changed(patch, "model.backbone.with_cp", boolean(given.checkpointing != CheckpointPolicy::kNone, true),
                 boolean(with_cp, true));
  if (with_cp && differing > 0) {
    patch.notes.push_back("model.backbone.with_cp checkpoints every block whose input needs a gradient or none: the "
                          "plan differs from that in " + std::to_string(differing) +
                          " blocks; with_cp=True is written, which keeps less memory and recomputes more than the plan");
  }
  if (offloaded > 0) {
    patch.notes.push_back("the plan keeps " + std::to_string(offloaded) +
                          " blocks' activations in pinned CPU memory, which MMEngine has no key for; they are written "
                          "as checkpointed");
  }
  // MMFullyShardedDataParallel is FSDP1 with the whole model one unit; its
  // cpu_offload is CPUOffload (planner/configs/mmengine_config.cc). A plan that keeps that
  // wrapper sets cpu_offload; any other ZeRO or offload has no key here.
  const bool whole_model_fsdp1 = c.zero_stage == 3 && planner::sharding_of(plan.settings) == planner::Sharding::kFsdp1 &&
                                 plan.settings.fsdp_wrap == planner::FsdpWrap::kModel;
  if (whole_model_fsdp1 && given.zero_stage == 3 && given.fsdp_wrap == planner::FsdpWrap::kModel) {
    set_if_changed(patch, "model_wrapper_cfg.cpu_offload", boolean(given.offload_param == Offload::kCpu, true),
                   boolean(c.offload_param == Offload::kCpu, true));
  } else if (c.zero_stage > 0 || c.offload_optimizer != Offload::kNone || c.offload_param != Offload::kNone) {
    patch.notes.push_back("ZeRO stage " + std::to_string(c.zero_stage) +
                          " and offload have no key here: MMEngine's Runner wraps the model in DDP or in "
                          "MMFullyShardedDataParallel (FSDP1, the whole model one unit, cpu_offload), which is not "
                          "this plan");
  }
  const int world = plan.settings.world_size();
  std::ostringstream text;
  if (patch.changes.empty()) {
    text << "# the config already runs the plan: no key to change\n";
  } else {
    text << (world > 1 ? "# bash tools/dist_train.sh " : "# python tools/train.py ") << path;
    if (world > 1) text << " " << plan.settings.gpus_per_node;
    text << " --cfg-options";
    for (const auto& [key, value] : patch.changes) text << " " << key << "=" << value;
    text << "\n";
  }
  if (plan.settings.nodes > 1) {
    patch.notes.push_back("on " + std::to_string(plan.settings.nodes) + " nodes: launch tools/dist_train.sh on each "
                          "with NNODES, NODE_RANK and MASTER_ADDR set");
  }
  patch.text = text.str();
  return patch;
}

LayerChoices layer_choices(const planner::Plan& plan, const std::vector<bool>& checkpointable) {
  LayerChoices out;
  for (size_t b = 0; b < plan.blocks.size() && b < checkpointable.size(); ++b) {
    if (!checkpointable[b]) continue;
    ++out.layers;
    if (plan.blocks[b] == BlockChoice::kCheckpoint) ++out.checkpointed;
    if (plan.blocks[b] == BlockChoice::kOffload) ++out.offloaded;
  }
  return out;
}

RecipePatch torchtune_patch(const planner::Plan& plan, const planner::RunSettings& given,
                            const std::vector<bool>& checkpointable, std::string_view yaml_text, std::string_view path,
                            const std::vector<std::string>& overrides) {
  RecipePatch patch;
  const planner::GlobalConfig& c = plan.config;
  set_if_changed(patch, "batch_size", std::to_string(given.micro_batch), std::to_string(c.micro_batch));
  set_if_changed(patch, "gradient_accumulation_steps", std::to_string(given.grad_accum), std::to_string(c.grad_accum));
  const bool checkpoint = checkpoint_every_layer(layer_choices(plan, checkpointable), patch.notes,
                                                 "enable_activation_checkpointing");
  set_if_changed(patch, "enable_activation_checkpointing",
                 boolean(given.checkpointing != CheckpointPolicy::kNone, true), boolean(checkpoint, true));
  if (!checkpoint && given.offload_checkpoint_inputs) patch.changes.emplace_back("enable_activation_offloading", "False");
  // Sharding: only the distributed recipes shard, always with FSDP2 (training.shard_model).
  const int world = plan.settings.world_size();
  if (c.zero_stage > 0 && world > 1) {
    patch.notes.push_back("sharded over " + std::to_string(world) +
                          " GPUs: run the distributed recipe (full_finetune_distributed / lora_finetune_distributed) "
                          "with tune run --nproc_per_node " + std::to_string(plan.settings.gpus_per_node));
    if (c.zero_stage == 1) {
      patch.notes.push_back("ZeRO-1 (optimizer states sharded, gradients not) has no torchtune form: FSDP2 shards "
                            "gradients too (ZeRO-2's layout with fsdp_reshard_after_forward False)");
    }
    set_if_changed(patch, "fsdp_reshard_after_forward", boolean(given.zero_stage != 2, true),
                   boolean(c.zero_stage != 2, true));
  }
  const bool cpu_offload = c.offload_param == Offload::kCpu && c.offload_optimizer == Offload::kCpu;
  if (cpu_offload || given.offload_param == Offload::kCpu) {
    set_if_changed(patch, "fsdp_cpu_offload", boolean(given.offload_param == Offload::kCpu, true),
                   boolean(cpu_offload, true));
  }
  if (c.offload_optimizer != Offload::kNone && !cpu_offload) {
    patch.notes.push_back("the plan offloads the optimizer alone to " +
                          std::string(c.offload_optimizer == Offload::kNvme ? "NVMe" : "the CPU") +
                          ": torchtune offloads parameters, gradients and optimizer together (fsdp_cpu_offload) "
                          "or nothing");
  }
  std::ostringstream text;
  if (patch.changes.empty()) {
    text << "# the config already runs the plan: no key to change\n";
  } else {
    text << "# tune run RECIPE --config " << path;
    for (const std::string& given_override : overrides) text << " \\\n#     " << given_override;
    for (const auto& [key, value] : patch.changes) text << " \\\n#     " << key << "=" << value;
    text << "\n" << yaml_diff(yaml_text, path, patch.changes);
  }
  patch.text = text.str();
  return patch;
}

RecipePatch trainer_arguments_patch(const planner::Plan& plan, const planner::RunSettings& given,
                                    const std::vector<bool>& checkpointable, bool accelerate_launch) {
  RecipePatch patch;
  const planner::GlobalConfig& c = plan.config;
  nlohmann::json merge = nlohmann::json::object();
  if (given.micro_batch != c.micro_batch) {
    patch.changes.emplace_back("per_device_train_batch_size", std::to_string(c.micro_batch));
    merge["per_device_train_batch_size"] = c.micro_batch;
  }
  if (given.grad_accum != c.grad_accum) {
    patch.changes.emplace_back("gradient_accumulation_steps", std::to_string(c.grad_accum));
    merge["gradient_accumulation_steps"] = c.grad_accum;
  }
  // The Trainer refuses gradient_checkpointing beside FSDP's activation
  // checkpointing (transformers trainer.py, create_accelerator_and_postprocess):
  // under an Accelerate FSDP config, checkpointing is that file's key.
  const bool fsdp_launch = accelerate_launch && given.sharding && *given.sharding != planner::Sharding::kDeepspeed;
  if (!fsdp_launch) {
    const bool checkpoint =
        checkpoint_every_layer(layer_choices(plan, checkpointable), patch.notes, "gradient_checkpointing");
    if (checkpoint != (given.checkpointing != CheckpointPolicy::kNone)) {
      patch.changes.emplace_back("gradient_checkpointing", boolean(checkpoint, true));
      merge["gradient_checkpointing"] = checkpoint;
    }
  }
  if (accelerate_launch) {
    // ZeRO and offload: the Accelerate config's keys (--emit accelerate).
  } else if (changes_deepspeed_config(c, given)) {
    patch.changes.emplace_back("deepspeed", "ds_config.json");
    merge["deepspeed"] = "ds_config.json";
    patch.notes.push_back(deepspeed_config_note(c));
  }
  std::ostringstream text;
  if (patch.changes.empty()) {
    text << "# the arguments already run the plan: nothing to change\n";
  } else {
    text << "# command line:\n";
    for (const auto& [key, value] : patch.changes) text << "--" << key << " " << value << " ";
    text << "\n# TrainingArguments JSON merge patch (RFC 7386):\n" << merge.dump(2) << "\n";
  }
  patch.text = text.str();
  return patch;
}

}  // namespace headroom::reports
