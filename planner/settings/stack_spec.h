// What a stack resolves to: every mechanism decided (StackSpec), at the top of
// the band and at its bottom, with the words for what was not known
// (ResolvedStack). settings/stack_mechanisms.h fills them row by row.
#pragma once

#include <string>
#include <vector>

#include "models/zoo.h"
#include "planner/settings/stack_choices.h"

namespace headroom::planner {

// One resolved row: every mechanism decided.
struct StackSpec {
  OptimizerImpl optimizer_impl = OptimizerImpl::kForeach;
  LossSpec loss;
  Recompute recompute = Recompute::kBlock;
  AdapterDtype adapter_dtype = AdapterDtype::kFp32;
  // torch.compile covers the loss function, not only the model's blocks
  // (planner/mechanisms/loss_variants.h; docs/stacks.md, "torch.compile"). Only with compile.
  bool compile_loss = false;
  // Liger's RMSNorm, SwiGLU and RoPE Functions replace the model's modules
  // (planner/mechanisms/liger_kernels.h; docs/stacks.md, "Liger's kernels").
  bool liger_kernels = false;
  // Gradient accumulation under FSDP runs the micro-steps before the last in
  // no_sync() (FSDP2: set_requires_gradient_sync(False)): each unit keeps its
  // unsharded gradient instead of reduce-scattering (planner/memory/model_states.h,
  // accumulates_unsharded; docs/stacks.md, "FSDP accumulation").
  bool fsdp_no_sync = false;
  // QLoRA over bitsandbytes: which unquantized parameters the script upcasts to
  // fp32 (planner/mechanisms/kbit_prep.h). Changes bytes only under pure bf16.
  KbitPrep kbit_prep = KbitPrep::kNone;
  // The forward runs under torch.autocast over the 16-bit weights (precision
  // bf16): Accelerate's prepare_model wraps model.forward for transformers'
  // Trainer and the diffusers scripts. LayerNorm and softmax then give fp32,
  // and fp32 adapters and upcast weights are cast per matmul (planner/mechanisms/autocast.h;
  // docs/stacks.md, "Autocast over a bf16 model"). Changes bytes only under pure bf16.
  bool autocast = false;
  // SDPA over grouped K/V runs on K and V copied to every head (transformers'
  // repeat_kv before 4.54; from 4.54 SDPA's enable_gqa when the batch has no
  // padding mask). docs/stacks.md, "Releases".
  bool repeat_kv = false;
  // Whose rotary modules the model runs, for the RoPE caches they keep (transformers
  // before 4.45: one per Qwen2 / GPT-NeoX layer; torchtune's). docs/models.md, "Rotary caches".
  models::RopeModules rope_modules = models::RopeModules::kPerForward;
  // LoRA with checkpointing: a hook makes the frozen input embeddings' output a
  // leaf that requires grad, so the embeddings block records its graph
  // (planner/mechanisms/input_require_grads.h; docs/stacks.md, "Input gradients
  // under checkpointing").
  bool input_require_grads = false;
  // The loop calls optimizer.zero_grad() between the loss and backward() (torchvision's
  // classification reference), so the previous step's gradients live through the
  // first micro-step's forward (docs/stacks.md, "Where zero_grad runs").
  bool grads_through_forward = false;
  // DPO: every sample is a chosen and a rejected row, and a reference forward runs under
  // no_grad after the policy's (planner/mechanisms/preference_pairs.h; docs/stacks.md, "Recipes").
  Recipe recipe = Recipe::kSupervised;
  Reference reference = Reference::kCopy;
  // GRPO: where the completions are generated (planner/mechanisms/vllm_engine.h).
  Generation generation = Generation::kGenerate;
};

// The stack as the planner prices it: the top of the band (each unknown at its
// most expensive value), the bottom, and in words what was not known.
struct ResolvedStack {
  StackSpec top;
  StackSpec bottom;
  std::vector<std::string> unknowns;  // empty: the band has no width from the stack
  // Whether repeat_kv is open (top and bottom differ). Its unknown is said only
  // for a model with grouped K/V under SDPA, which the settings alone do not show
  // (prediction.cc adds it; repeat_kv_unknown()).
  bool repeat_kv_open = false;
  // Whether the per-layer RoPE caches are open (the transformers release is). Said
  // only for a model that holds them (models::holds_transformers_rope_caches).
  bool layer_rope_caches_open = false;
};

}  // namespace headroom::planner
