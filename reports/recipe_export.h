// A Plan written back into the files the run was read from (docs/config-import.md,
// "Writing the plan back"): the keys a user changes in a torchtune recipe config
// or a Trainer's arguments, with what those cannot say named in notes rather
// than approximated silently. Pure functions of their inputs.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "planner/predict/plan.h"

namespace headroom::reports {

struct RecipePatch {
  // Keys to set, in the file's own spelling, with their new values ("batch_size", "2").
  std::vector<std::pair<std::string, std::string>> changes;
  std::string text;                // the export: overrides, or a patch of the file
  std::vector<std::string> notes;  // what the plan chose that these keys cannot say
};

// What the plan does with its layers, for the all-or-nothing checkpointing of
// torchtune and the Trainer. `checkpointable`: per plan block, whether it is a
// layer (the graph's checkpointable blocks).
struct LayerChoices {
  int layers = 0;
  int checkpointed = 0;
  int offloaded = 0;
};
LayerChoices layer_choices(const planner::Plan& plan, const std::vector<bool>& checkpointable);

// Checkpointing as all-or-nothing keys (`key`) say it: true when the plan
// checkpoints or offloads any layer; a plan that does so for some layers, or
// offloads activations, is written as every layer checkpointed, said in `notes`.
bool checkpoint_every_layer(const LayerChoices& layers, std::vector<std::string>& notes, const std::string& key);

// Whether the plan's ZeRO stage or offload differs from `given`'s (the
// DeepSpeed config's keys), and the note that points at --emit deepspeed.
bool changes_deepspeed_config(const planner::GlobalConfig& c, const planner::RunSettings& given);
std::string deepspeed_config_note(const planner::GlobalConfig& c);

// The torchtune overrides that turn `given` (the run as the config and its
// `overrides` say it) into `plan`, as `tune run` takes them after the given
// ones, and a unified diff of the config file (`yaml_text`, at `path`) for the
// top-level keys they set.
RecipePatch torchtune_patch(const planner::Plan& plan, const planner::RunSettings& given,
                            const std::vector<bool>& checkpointable, std::string_view yaml_text, std::string_view path,
                            const std::vector<std::string>& overrides = {});

// The TrainingArguments that turn `given` into `plan`: as command-line
// arguments and as a JSON merge patch (RFC 7386) of to_json_string's object.
// `accelerate_launch`: the run is launched with an Accelerate config, whose
// keys (accelerate_patch) say ZeRO and offload, and under FSDP checkpointing.
RecipePatch trainer_arguments_patch(const planner::Plan& plan, const planner::RunSettings& given,
                                    const std::vector<bool>& checkpointable, bool accelerate_launch = false);

// The axolotl keys (micro_batch_size, gradient_accumulation_steps,
// gradient_checkpointing, deepspeed) that turn `given` into `plan`, as a
// unified diff of the YAML file.
RecipePatch axolotl_patch(const planner::Plan& plan, const planner::RunSettings& given,
                          const std::vector<bool>& checkpointable, std::string_view yaml_text, std::string_view path);

// The same for a LLaMA-Factory config (per_device_train_batch_size,
// gradient_accumulation_steps, disable_gradient_checkpointing, deepspeed).
RecipePatch llamafactory_patch(const planner::Plan& plan, const planner::RunSettings& given,
                               const std::vector<bool>& checkpointable, std::string_view yaml_text,
                               std::string_view path);

// The XTuner config keys (train_dataloader.batch_size,
// optim_wrapper.accumulative_counts, model.use_activation_checkpointing) as the
// `--cfg-options` of `xtuner train`, with `--deepspeed` when the plan needs ZeRO
// or offload; and a unified diff of the config's top-level `batch_size = N` /
// `accumulative_counts = N` lines where `variable_feeds` says that variable
// holds the dict's value (XTuner's own configs are written that way).
struct XtunerVariables {
  bool batch_size = false;           // top-level batch_size == train_dataloader.batch_size
  bool accumulative_counts = false;  // top-level accumulative_counts == optim_wrapper.accumulative_counts
};
RecipePatch xtuner_patch(const planner::Plan& plan, const planner::RunSettings& given,
                         const std::vector<bool>& checkpointable, std::string_view py_text, std::string_view path,
                         XtunerVariables variable_feeds);

// The MMEngine keys (mmpretrain's tools/train.py --cfg-options) that turn
// `given` into `plan`: train_dataloader.batch_size,
// optim_wrapper.accumulative_counts, the AmpOptimWrapper and its dtype, and
// model.backbone.with_cp. `with_cp_blocks`: per plan block, whether with_cp=True
// checkpoints it (Bottleneck.forward skips a block whose input needs no
// gradient). A config that wraps in MMFullyShardedDataParallel (FSDP1, the whole
// model one unit) gets model_wrapper_cfg.cpu_offload as the plan offloads. What
// these keys cannot say (other ZeRO, offload, a subset of blocks) is a note.
// `path` names the config in the command shown.
RecipePatch mmengine_patch(const planner::Plan& plan, const planner::RunSettings& given,
                           const std::vector<bool>& with_cp_blocks, std::string_view path);

}  // namespace headroom::reports
