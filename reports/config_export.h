// A Plan written as the files a user launches with: a DeepSpeed config (JSON),
// an Accelerate FSDP config (YAML text) and a PyTorch snippet that applies the
// per-block checkpoint/offload choices. Pure functions of the Plan: same plan,
// same bytes. What each export holds and how to use it: docs/config-export.md.
//
// The DeepSpeed config holds only keys DeepSpeed knows: its sub-configs
// (zero_optimization, offload_*) are pydantic models with extra="forbid"
// (deepspeed/runtime/config_utils.py), so which modules to checkpoint travels
// separately, in CheckpointModules and the torch snippet.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "planner/predict/plan.h"

namespace headroom::reports {

// Module paths (Plan.block_names, e.g. "model.layers.3") by what the plan does
// with their activations, in block order.
struct CheckpointModules {
  std::vector<std::string> checkpoint;  // wrap in torch.utils.checkpoint (recomputed in backward)
  std::vector<std::string> offload;     // saved activations kept in pinned CPU memory
};
CheckpointModules checkpoint_modules(const planner::Plan& plan);

// The DeepSpeed config of the plan: ZeRO stage, optimizer/parameter offload,
// bucket sizes (elements), precision, micro-batch, accumulation and
// train_batch_size = micro x accumulation x GPUs. Placeholders a user must
// edit are named in deepspeed_notes (learning rate, NVMe path).
nlohmann::json deepspeed_config(const planner::Plan& plan);

// Sentences to show next to the DeepSpeed config: what it cannot express
// (which blocks to checkpoint), placeholders to edit, known refusals (a
// client torch optimizer with ZeRO-Offload).
std::vector<std::string> deepspeed_notes(const planner::Plan& plan);

// The transformer layer class(es) FSDP should wrap, comma-separated
// ("LlamaDecoderLayer"), known for the zoo models; kLayerClassPlaceholder otherwise.
inline constexpr const char* kLayerClassPlaceholder = "REPLACE_WITH_LAYER_CLASS";
std::string transformer_layer_classes(const planner::Plan& plan);

// An `accelerate launch --config_file` YAML file (FSDP v1 keys): ZeRO 3 ->
// FULL_SHARD, 2 and 1 -> SHARD_GRAD_OP, 0 -> NO_SHARD; comments say where FSDP
// differs from the plan.
std::string accelerate_config_yaml(const planner::Plan& plan);

// Python source defining apply_headroom_plan(model), which checkpoints exactly
// the plan's checkpointed modules (use_reentrant=False) and keeps the
// offloaded modules' activations on the CPU (save_on_cpu(pin_memory=True)),
// with the micro-batch, accumulation and autocast dtype as constants and the
// training loop as comments. Valid Python for any module names.
std::string torch_snippet(const planner::Plan& plan);

}  // namespace headroom::reports
