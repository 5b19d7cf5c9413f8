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

namespace headroom::planner {

struct RunSettings;

enum class Stack { kUnspecified, kHfTrainer, kTorchtune, kLitgpt, kTorchtitan, kDeepspeed, kTorchAmp, kComposer };

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
  kFusedXentropy,   // flash-attn's fused cross-entropy (llm-foundry): keeps the 16-bit logits and an fp32 lse per row
  kFusedLinearCe,   // Liger's fused linear cross-entropy: logits only chunk by chunk, gradients made in forward
};

// What a checkpointed block keeps from its forward (docs/stacks.md, "Checkpointing").
enum class Recompute {
  kBlock,       // torch.utils.checkpoint of the whole block: only its inputs stay
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

struct LossSpec {
  LossImpl impl = LossImpl::kFullKeepLogits;
  int chunks = 8;  // kChunked: torchtune's num_output_chunks
  bool operator==(const LossSpec&) const = default;
};

// One resolved row: every mechanism decided.
struct StackSpec {
  OptimizerImpl optimizer_impl = OptimizerImpl::kForeach;
  LossSpec loss;
  Recompute recompute = Recompute::kBlock;
  AdapterDtype adapter_dtype = AdapterDtype::kFp32;
  // torch.compile covers the loss function, not only the model's blocks
  // (planner/loss_variants.h; docs/stacks.md, "torch.compile"). Only with compile.
  bool compile_loss = false;
  // Gradient accumulation under FSDP runs the micro-steps before the last in
  // no_sync() (FSDP2: set_requires_gradient_sync(False)): each unit keeps its
  // unsharded gradient instead of reduce-scattering (planner/model_states.h,
  // accumulates_unsharded; docs/stacks.md, "FSDP accumulation").
  bool fsdp_no_sync = false;
  // QLoRA over bitsandbytes: which unquantized parameters the script upcasts to
  // fp32 (planner/kbit_prep.h). Changes bytes only under pure bf16.
  KbitPrep kbit_prep = KbitPrep::kNone;
  // The forward runs under torch.autocast over the 16-bit weights (precision
  // bf16): Accelerate's prepare_model wraps model.forward for transformers'
  // Trainer and the diffusers scripts. LayerNorm and softmax then give fp32,
  // and fp32 adapters and upcast weights are cast per matmul (planner/autocast.h;
  // docs/stacks.md, "Autocast over a bf16 model"). Changes bytes only under pure bf16.
  bool autocast = false;
};

// The stack as the planner prices it: the top of the band (each unknown at its
// most expensive value), the bottom, and in words what was not known.
struct ResolvedStack {
  StackSpec top;
  StackSpec bottom;
  std::vector<std::string> unknowns;  // empty: the band has no width from the stack
};
ResolvedStack resolve_stack(const RunSettings& settings);

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
// torchtune, litgpt: FSDP2; composer: FSDP1; the others: DeepSpeed).
Sharding sharding_of(const RunSettings& settings);
// Whether ZeRO-3 is one of torch's FSDPs (FSDP1 or FSDP2) rather than DeepSpeed's stage 3.
bool shards_with_fsdp(const RunSettings& settings);
// Whether ZeRO-3 is FSDP2's fully_shard (its CPUOffloadPolicy, its float8 all-gather).
bool shards_with_fsdp2(const RunSettings& settings);
// FSDP's reduce dtype: settings.reduce_dtype, else fp32 under mixed precision
// (fp32 sharded parameters) and the parameters' dtype otherwise.
ReduceDtype reduce_dtype_of(const RunSettings& settings);

// Whether the stack's fully_shard leaves the last layer unsharded after forward,
// since backward needs it at once (torchtitan's apply_fsdp at 9dec370:
// reshard_after_forward = int(layer_id) < len(model.layers) - 1).
bool fsdp2_keeps_last_layer(Stack value);

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
std::optional<KbitPrep> parse_kbit_prep(std::string_view text);
inline constexpr const char* kStackNames =
    "hf-trainer, torchtune, litgpt, torchtitan, deepspeed, torch-amp, composer, unspecified";
inline constexpr const char* kOptimizerImplNames = "foreach, fused, for-loop, in-backward";
inline constexpr const char* kLossNames = "full-keep-logits, full, chunked[:N], no-upcast, shift-copy, fused-xentropy";
inline constexpr const char* kRecomputeNames = "block, selective-op";
inline constexpr const char* kAdapterDtypeNames = "fp32, model";
inline constexpr const char* kShardingNames = "deepspeed, fsdp1, fsdp2";
inline constexpr const char* kReduceDtypeNames = "fp32, param";
inline constexpr const char* kFsdpWrapNames = "layers, model";
inline constexpr const char* kKbitPrepNames = "none, norms-fp32, peft";

}  // namespace headroom::planner
