// The training stack a run uses: the same model, batch and GPU allocate
// differently under transformers' Trainer, torchtune, litgpt, torchtitan,
// DeepSpeed or a plain AMP loop. A stack selects a row of a documented table
// of mechanisms (docs/stacks.md, with the framework file that shows each);
// every entry can be overridden on its own. What neither the stack nor an
// override pins down is priced at its most expensive value (the top of the
// band, what `plan` plans against) and at its cheapest (the bottom), so the
// verdict can say TIGHT instead of a false FITS.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "planner/settings/run_settings.h"
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
ResolvedStack resolve_stack(const RunSettings& settings);

// What the band says when the transformers release, and so repeat_kv, is open.
std::string_view repeat_kv_unknown();
// What it says when that release leaves transformers' per-layer RoPE caches open.
std::string_view layer_rope_caches_unknown();

// Whether the stack runs transformers' modeling code on a Hugging Face config (the
// Trainer, DeepSpeed, a plain loop over AutoModel; unspecified priced as one):
// transformers' releases then change the attention's bytes.
bool runs_transformers_models(Stack value);

// Whether the QLoRA preparation (StackSpec::kbit_prep) can change this run's
// bytes: bitsandbytes NF4 under pure bf16 with the Trainer's autocast (stack
// hf-trainer, or unspecified priced as it), without ZeRO.
bool kbit_prep_matters(const RunSettings& settings);

// Whether the step runs through DeepSpeed's engine (the deepspeed stack, or ZeRO
// by DeepSpeed): it casts the module to its 16-bit dtype, PEFT's fp32 adapters
// included, and runs no autocast.
bool through_deepspeed_engine(const RunSettings& settings);

// Whether the forward's autocast over the 16-bit weights (StackSpec::autocast)
// can change this run's bytes: precision bf16, or bf16/fp16-mixed sharded by
// FSDP at ZeRO-3 (its mixed precision computes on 16-bit unsharded parameters).
// The amp precisions are autocast over fp32 weights by definition, and
// DeepSpeed-style mixed precision runs the engine's 16-bit module.
bool autocast_matters(const RunSettings& settings);

// `settings` with every unknown of its stack pinned to the cheapest value (the
// bottom of the band); nullopt when the stack leaves nothing open.
std::optional<RunSettings> bottom_of_band(const RunSettings& settings);

// Whether the caching allocator runs with expandable segments: as the settings
// say, else as the stack's launcher sets PYTORCH_CUDA_ALLOC_CONF (torchtitan's
// run_llama_train.sh / run_train.sh export expandable_segments:True; the others
// leave the default).
bool uses_expandable_segments(const RunSettings& settings);

// Who shards at ZeRO-3: settings.sharding, else the stack's (torchtitan,
// torchtune, litgpt's LoRA: FSDP2; composer, litgpt's full fine-tune: FSDP1; the
// others: DeepSpeed).
Sharding sharding_of(const RunSettings& settings);
// Whether ZeRO-3 is one of torch's FSDPs (FSDP1 or FSDP2) rather than DeepSpeed's stage 3.
bool shards_with_fsdp(const RunSettings& settings);
// Whether ZeRO-3 is FSDP2's fully_shard (its CPUOffloadPolicy, its float8 all-gather).
bool shards_with_fsdp2(const RunSettings& settings);
// Whether torch's FSDPs shard the parameters at this ZeRO stage: stage 3 (resharded
// after forward), and stage 2 under FSDP, which keeps the parameters sharded too and
// differs only in when it reshards them (fsdp_keeps_unsharded).
bool fsdp_shards_params(const RunSettings& settings, int zero_stage);
// Whether FSDP keeps each unit's unsharded parameters from its forward to its own
// backward: FSDP2's reshard_after_forward=False (_fsdp_param_group.py post_forward:
// no reshard unless _reshard_after_forward; post_backward reshards), FSDP1's
// SHARD_GRAD_OP (_runtime_utils.py _should_free_in_backward). headroom's `--zero 2`
// under `--sharding fsdp1|fsdp2` (docs/memory-model.md, "FSDP without resharding").
bool fsdp_keeps_unsharded(const RunSettings& settings, int zero_stage);
// FSDP's reduce dtype: settings.reduce_dtype, else fp32 under mixed precision
// (fp32 sharded parameters) and the parameters' dtype otherwise.
ReduceDtype reduce_dtype_of(const RunSettings& settings);

// Whether the stack's fully_shard leaves the last layer unsharded after forward,
// since backward needs it at once (torchtitan's apply_fsdp at 9dec370:
// reshard_after_forward = int(layer_id) < len(model.layers) - 1).
bool fsdp2_keeps_last_layer(Stack value);

}  // namespace headroom::planner
