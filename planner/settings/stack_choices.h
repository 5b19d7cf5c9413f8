// The names of the training stacks and of the mechanisms a stack decides (the
// optimizer implementation, the loss, recompute, adapter dtype, sharding, QLoRA
// preparation), with their parsers and choice lists: the vocabulary RunSettings
// holds overrides in. What each stack does with them is settings/stack.h.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace headroom::planner {

enum class Stack { kUnspecified, kHfTrainer, kTorchtune, kLitgpt, kTorchtitan, kDeepspeed, kTorchAmp, kComposer, kUnsloth };

// Who shards the parameters at ZeRO stage 3 (docs/stacks.md, "Sharding").
enum class Sharding {
  kDeepspeed,  // DeepSpeed ZeRO-3: 16-bit partitions, fp32 master partitions, prefetch buckets
  kFsdp1,      // torch FullyShardedDataParallel: one FlatParameter per wrapped unit
  kFsdp2,      // torch fully_shard: each parameter a DTensor shard
};

// What FSDP1 wraps as one FlatParameter (auto_wrap_policy; docs/memory-model.md, "FSDP1").
enum class FsdpWrap {
  kLayers,  // each transformer layer, the root the rest (transformer_auto_wrap_policy, Composer's fsdp_wrap_fn)
  kModel,   // the whole model: no auto_wrap_policy (MMEngine's default, Accelerate's NO_WRAP)
};

// The dtype FSDP reduce-scatters gradients in (MixedPrecision.reduce_dtype,
// MixedPrecisionPolicy.reduce_dtype).
enum class ReduceDtype {
  kFp32,   // fp32 (Composer's mixed_precision DEFAULT, torchtitan's mixed_precision_reduce)
  kParam,  // the parameters' compute dtype (Composer PURE, torch's default when unset)
};

// How optimizer.step() runs (torch/optim/adam.py, adamw.py; docs/stacks.md).
enum class OptimizerImpl {
  kForeach,     // torch default on CUDA: one state-sized temporary list at the step
  kFused,       // fused=True, DeepSpeed FusedAdam: no per-parameter temporaries
  kForLoop,     // foreach=False: temporaries of one parameter at a time
  kInBackward,  // torchtune optimizer_in_bwd: each gradient stepped and freed as it is produced
};

// How the causal-LM loss is computed over the vocabulary (docs/stacks.md, "The loss").
enum class LossImpl {
  kFullKeepLogits,  // fp32 upcast + cross-entropy; the caller keeps the bf16 logits through backward
  kFull,            // the same, with the model output dropped before backward (transformers Trainer)
  kChunked,         // torchtune: lm_head and fp32 cross-entropy chunk by chunk
  kNoUpcast,        // litgpt: cross-entropy in the logits' dtype, logits kept through backward
  kShiftCopy,       // model code that shifts with a contiguous 16-bit copy first (Qwen v1 remote code), output dropped
  kUpcastShift,     // transformers < 4.49: fp32 upcast, then a contiguous fp32 copy shifted by one, output dropped
  kFusedXentropy,   // flash-attn's fused cross-entropy (llm-foundry): keeps the 16-bit logits and an fp32 lse per row
  kFusedLinearCe,   // Liger's fused linear cross-entropy: logits only chunk by chunk, gradients made in forward
  kLitgptFull,      // litgpt finetune/full.py under Fabric: fp32 logits held to the next forward, cat + slice grads
  kLitgptLora,      // litgpt finetune/lora.py under Fabric: the same over lm_head's 128-token chunks
  kTrlFusedHead,    // TRL >= 1.15 SFTTrainer: chunked log-probabilities, no logits (mechanisms/trl_fused_head.h)
  kUnslothFusedCe,  // unsloth_zoo's fused CE, compiled: chunks of up to 4 GiB of fp32 logits, gradients in forward
  kUnslothFusedCeEager,  // the same in its eager fallback (torch.compile failed): fp32 log-probs and grads per chunk
};

// What a checkpointed block keeps from its forward (docs/stacks.md, "Checkpointing").
enum class Recompute {
  kBlock,       // torch.utils.checkpoint of the whole block: only its inputs stay
  kBlockReentrant,  // the same with use_reentrant=True: where no input of a block requires grad, the
                    // block records no graph and its parameters get no gradient (mechanisms/reentrant_checkpoint.h)
  kSelectiveOp, // torchtitan's op-level selective AC: also the outputs of every other mm and of SDPA
};

// The dtype LoRA adapters are created in (docs/stacks.md, "LoRA adapters").
enum class AdapterDtype {
  kFp32,   // PEFT get_peft_model(autocast_adapter_dtype=True): fp32 adapters on a 16-bit model
  kModel,  // torchtune, litgpt: built in the model's dtype
};

// What a QLoRA script does to the parameters bitsandbytes left unquantized (the
// embeddings, norms and output layer) before training (docs/stacks.md, "QLoRA
// preparation").
enum class KbitPrep {
  kNone,       // trained as loaded (axolotl, TRL >= 0.26, LLaMA-Factory's default)
  kNormsFp32,  // norms cast to fp32 (TRL 0.7.5-0.25 with bf16, artidoro/qlora, LLaMA-Factory upcast_layernorm)
  kPeft,       // PEFT's prepare_model_for_kbit_training: every unquantized parameter fp32
};

// What the step trains for (docs/stacks.md, "Recipes").
enum class Recipe {
  kSupervised,  // the model's own loss over each sample (SFT, classification)
  kDpo,         // TRL's DPOTrainer: chosen and rejected rows in one batch, a reference model's log-probs
  kReward,      // TRL's RewardTrainer: chosen and rejected rows in one batch through a one-value `score` head
  kGrpo,        // TRL's GRPOTrainer: generation with a KV cache, then the policy over prompt + completion
};

// Where DPO's and GRPO's reference log-probs come from (trl/trainer/dpo_trainer.py,
// grpo_trainer.py, 1.16.0).
enum class Reference {
  kCopy,             // a frozen second model (ref_model, or the copy TRL loads without PEFT)
  kAdapterDisabled,  // PEFT: the policy's base with its adapters disabled, no second copy
  kPrecomputed,      // precompute_ref_log_probs: read from the dataset, no reference forward in the step
  kNone,             // GRPO with beta 0 (its default): no reference model, no reference forward
};

// Where GRPO's completions are generated (TRL 1.16's GRPOConfig use_vllm, vllm_mode,
// vllm_enable_sleep_mode; docs/stacks.md, "GRPO with vLLM").
enum class Generation {
  kGenerate,           // transformers' generate on the policy (use_vllm false)
  kVllmColocate,       // an LLM in the trainer's process, its gpu_memory_utilization share held all step
  kVllmColocateSleep,  // the same with sleep mode: the share is taken for generation only (level 2 sleep)
  kVllmServer,         // `trl vllm-serve` on other GPUs: nothing of vLLM on the trainer's
};

struct LossSpec {
  LossImpl impl = LossImpl::kFullKeepLogits;
  int chunks = 8;  // kChunked: torchtune's num_output_chunks
  bool operator==(const LossSpec&) const = default;
};

std::string_view stack_name(Stack value);
std::string_view optimizer_impl_name(OptimizerImpl value);
std::string loss_name(const LossSpec& value);  // "full", "chunked:8", ...
std::optional<Stack> parse_stack(std::string_view text);
std::optional<OptimizerImpl> parse_optimizer_impl(std::string_view text);
std::optional<LossSpec> parse_loss(std::string_view text);  // "chunked" = "chunked:8"
std::string_view recompute_name(Recompute value);
std::optional<Recompute> parse_recompute(std::string_view text);
std::string_view adapter_dtype_name(AdapterDtype value);
std::string_view sharding_name(Sharding value);
std::optional<Sharding> parse_sharding(std::string_view text);
std::string_view fsdp_wrap_name(FsdpWrap value);
std::optional<FsdpWrap> parse_fsdp_wrap(std::string_view text);
std::string_view reduce_dtype_name(ReduceDtype value);
std::optional<ReduceDtype> parse_reduce_dtype(std::string_view text);
std::optional<AdapterDtype> parse_adapter_dtype(std::string_view text);
std::string_view kbit_prep_name(KbitPrep value);
std::string_view recipe_name(Recipe value);
std::optional<Recipe> parse_recipe(std::string_view text);
std::string_view reference_name(Reference value);
std::optional<Reference> parse_reference(std::string_view text);
std::string_view generation_name(Generation value);
std::optional<Generation> parse_generation(std::string_view text);
std::optional<KbitPrep> parse_kbit_prep(std::string_view text);
// The choices, "a, b, c", for messages and --help (from the tables in stack_choices.cc).
std::string stack_names();
std::string optimizer_impl_names();
std::string loss_names();  // "chunked[:N]" for the chunked loss and its chunk count
std::string recompute_names();
std::string adapter_dtype_names();
std::string sharding_names();
std::string reduce_dtype_names();
std::string fsdp_wrap_names();
std::string kbit_prep_names();
std::string recipe_names();
std::string reference_names();
std::string generation_names();

}  // namespace headroom::planner
