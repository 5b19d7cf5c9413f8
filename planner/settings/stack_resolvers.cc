#include "planner/settings/stack_resolvers.h"

#include <array>
#include <utility>

#include "planner/settings/stack_traits.h"
#include "planner/settings/grpo_settings.h"

namespace headroom::planner {
namespace {

// A mechanism a stack pins (bottom == top) or leaves open between two values;
// `open_because` says what the user could tell headroom to close it.
template <typename T>
struct Choice {
  T bottom;
  T top;
  const char* open_because = nullptr;
};

struct StackRow {
  Stack stack;
  Choice<OptimizerImpl> optimizer;
  Choice<LossSpec> loss;
  Choice<Recompute> recompute;
  Choice<AdapterDtype> adapters;
};

constexpr LossSpec kFull{LossImpl::kFull, 8};
constexpr LossSpec kKeep{LossImpl::kFullKeepLogits, 8};
constexpr LossSpec kChunked8{LossImpl::kChunked, 8};
constexpr LossSpec kFusedXentropy{LossImpl::kFusedXentropy, 8};
constexpr LossSpec kUpcastShift{LossImpl::kUpcastShift, 8};
constexpr LossSpec kTrlFusedHead{LossImpl::kTrlFusedHead, 8};
constexpr LossSpec kLitgptFull{LossImpl::kLitgptFull, 8};
constexpr LossSpec kLitgptLora{LossImpl::kLitgptLora, 8};
constexpr LossSpec kUnslothFusedCe{LossImpl::kUnslothFusedCe, 8};
constexpr LossSpec kUnslothFusedCeEager{LossImpl::kUnslothFusedCeEager, 8};
constexpr OptimizerImpl kForeach = OptimizerImpl::kForeach;
constexpr OptimizerImpl kFused = OptimizerImpl::kFused;
constexpr Choice<Recompute> kWholeBlock{Recompute::kBlock, Recompute::kBlock, nullptr};
constexpr Choice<AdapterDtype> kPeftAdapters{AdapterDtype::kFp32, AdapterDtype::kFp32, nullptr};
constexpr Choice<AdapterDtype> kModelDtypeAdapters{AdapterDtype::kModel, AdapterDtype::kModel, nullptr};

// The table of docs/stacks.md; each entry's source is cited there.
const std::array<StackRow, 9> kStacks = {{
    {Stack::kUnspecified,
     {kFused, kForeach, "the optimizer implementation (give --stack or --optimizer-impl)"},
     {kFull, kKeep, "whether the model output is kept through backward (give --stack or --loss)"},
     kWholeBlock,
     {AdapterDtype::kModel, AdapterDtype::kFp32,
      "whether LoRA adapters are fp32 (PEFT) or in the model's dtype (torchtune, litgpt; give --stack or "
      "--adapter-dtype)"}},
    // transformers 4.x defaults to adamw_torch (foreach); 5.x to adamw_torch_fused with torch >= 2.8
    // (training_args.py). Trainer.compute_loss drops the outputs before backward (trainer.py).
    // Before 4.49 the loss keeps an fp32 shifted copy of the logits (docs/stacks.md, "The loss").
    {Stack::kHfTrainer,
     {kFused, kForeach, "the optimizer implementation: transformers >= 4.54 with torch >= 2.8 uses fused AdamW, "
                        "earlier releases foreach (give --versions transformers=X,torch=Y or --optimizer-impl)"},
     {kFull, kUpcastShift, "the transformers release: before 4.49 the loss keeps an fp32 shifted copy of the logits "
                           "(give --versions transformers=X or --loss)"},
     kWholeBlock,
     kPeftAdapters},
    // torchtune configs name torch.optim.AdamW with or without fused: True; their loss is the
    // chunked cross-entropy with 8 chunks (modules/loss).
    {Stack::kTorchtune,
     {kFused, kForeach, "whether the recipe's optimizer sets fused: True (give --optimizer-impl)"},
     {kChunked8, kChunked8, nullptr},
     kWholeBlock,
     kModelDtypeAdapters},
    // litgpt: torch.optim.AdamW without fused; chunked_cross_entropy over the logits Fabric
    // returns in fp32, held by fit's loop variable (litgpt/utils.py, finetune/full.py; lora.py
    // by the mode: script_loss).
    {Stack::kLitgpt, {kForeach, kForeach, nullptr}, {kLitgptFull, kLitgptFull, nullptr}, kWholeBlock,
     kModelDtypeAdapters},
    // torchtitan: optimizer implementation "fused" by default since 6e4988550 (2025-02-24,
    // "use Fused AdamW as default"), foreach before (optimizer.py: foreach = not fused); its
    // loss upcasts the full logits (components/loss.py). Its Llama train configs checkpoint with
    // mode = 'selective', selective_ac_option = 'op' (train_configs/llama3_8b.toml); mode
    // 'full' keeps only block inputs.
    {Stack::kTorchtitan,
     {kFused, kForeach, "the optimizer implementation: torchtitan defaults to fused AdamW since 2025-02 "
                        "(6e4988550), foreach before (give --optimizer-impl)"},
     {kFull, kKeep, "whether the train step drops the logits before backward (give --loss)"},
     {Recompute::kBlock, Recompute::kSelectiveOp,
      "whether the config checkpoints whole blocks or selectively by op (give --recompute)"},
     kPeftAdapters},
    // DeepSpeed's own FusedAdam / DeepSpeedCPUAdam: no torch foreach temporaries; the loss is the
    // model's (usually transformers').
    {Stack::kDeepspeed,
     {kFused, kFused, nullptr},
     {kFull, kKeep, "whether the training loop keeps the model output through backward (give --loss)"},
     kWholeBlock,
     kPeftAdapters},
    // A plain loop: torch's default optimizer on CUDA is foreach (optimizer.py
    // _default_to_fused_or_foreach); `out = model(...); out.loss.backward()` keeps the logits.
    {Stack::kTorchAmp, {kForeach, kForeach, nullptr}, {kKeep, kKeep, nullptr}, kWholeBlock,
     kPeftAdapters},
    // llm-foundry on Composer: DecoupledAdamW steps parameter by parameter
    // (composer/optim/decoupled_weight_decay.py, adamw: `for i, param in
    // enumerate(params)`); ComposerMPTCausalLM's loss_fn defaults to flash-attn's fused
    // cross-entropy (llmfoundry/models/mpt/modeling_mpt.py, loss_fn 'fused_crossentropy'),
    // and the trainer keeps state.outputs through backward (composer/trainer/trainer.py
    // _train_microbatch). It shards with FSDP1 (sharding_of).
    {Stack::kComposer, {OptimizerImpl::kForLoop, OptimizerImpl::kForLoop, nullptr},
     {kFusedXentropy, kFusedXentropy, nullptr}, kWholeBlock, kPeftAdapters},
    // Unsloth (2026.8.19, unsloth_zoo 2026.8.13) trains through TRL's SFTTrainer, so the
    // Trainer's optimizer; its CausalLM forward computes the loss with unsloth_zoo's fused
    // CE (models/llama.py CausalLM_fast_forward: unsloth_fused_ce_loss); its checkpointer
    // is reentrant (unsloth_zoo/gradient_checkpointing.py UnslothCheckpointFunction, forced
    // by unsloth_checkpoint); prepare_model_for_training upcasts lora_A/lora_B to fp32
    // (unsloth_zoo/training_utils.py). docs/stacks.md, "Unsloth".
    {Stack::kUnsloth,
     {kFused, kForeach, "the optimizer implementation: transformers >= 4.54 with torch >= 2.8 uses fused AdamW, "
                        "earlier releases foreach (give --versions transformers=X,torch=Y or --optimizer-impl)"},
     {kUnslothFusedCe, kUnslothFusedCeEager,
      "whether torch.compile runs Unsloth's fused cross-entropy chunk (its eager fallback keeps the fp32 "
      "log-probabilities and their gradient per chunk; give --loss unsloth-fused-ce)"},
     {Recompute::kBlockReentrant, Recompute::kBlockReentrant, nullptr},
     kPeftAdapters},
}};

const StackRow& row_of(Stack stack) {
  for (const StackRow& row : kStacks) {
    if (row.stack == stack) return row;
  }
  return kStacks[0];
}

// An override pins the mechanism; otherwise the stack's row decides, and an open
// row records why in `unknowns` when the choice can change this run (`matters`).
template <typename T>
void resolve_choice(const std::optional<T>& override_value, const Choice<T>& choice, T& top, T& bottom,
                    std::vector<std::string>& unknowns, bool matters = true) {
  if (override_value) {
    top = bottom = *override_value;
    return;
  }
  top = choice.top;
  bottom = choice.bottom;
  if (choice.open_because && matters) unknowns.emplace_back(choice.open_because);
}

// What the run's releases pin where the user gave no override (docs/stacks.md,
// "Releases"); nullopt where no release is given or none decides.
// transformers' Trainer: its default optim is adamw_torch (foreach) until 4.54,
// then adamw_torch_fused with torch >= 2.8 (training_args.py default_optim).
std::optional<OptimizerImpl> optimizer_by_release(const RunSettings& settings) {
  const std::optional<Release> transformers = release_of(settings.versions, "transformers");
  const bool trainer = settings.stack == Stack::kHfTrainer || settings.stack == Stack::kUnsloth;
  if (!trainer || !transformers) return std::nullopt;
  if (*transformers < Release{4, 54, 0}) return OptimizerImpl::kForeach;
  const std::optional<Release> torch = release_of(settings.versions, "torch");
  if (!torch) return std::nullopt;
  return *torch >= Release{2, 8, 0} ? OptimizerImpl::kFused : OptimizerImpl::kForeach;
}

// The Trainer's loss: transformers < 4.49 upcasts the logits and shifts them as a
// contiguous fp32 copy (in the model's forward up to 4.45, then ForCausalLMLoss until
// huggingface/transformers#35646).
// TRL's SFTTrainer (the Trainer's stack with TRL's release given) from 1.15 computes
// its loss through add_fused_lm_head (trl/trainer/sft_trainer.py, 1.15.0 and 1.16.0);
// its earlier loss types are not priced apart from the Trainer's.
std::optional<LossSpec> loss_by_release(const RunSettings& settings) {
  const std::optional<Release> transformers = release_of(settings.versions, "transformers");
  const std::optional<Release> trl = release_of(settings.versions, "trl");
  if (settings.stack == Stack::kHfTrainer && trl && *trl >= Release{1, 15, 0}) return kTrlFusedHead;
  // DPOTrainer scores through the fused head from 1.15 (dpo_trainer.py, 1.16.0:
  // add_fused_lm_head; earlier DPO is refused by validate_settings).
  if (settings.recipe == Recipe::kDpo) return kTrlFusedHead;
  // GRPOTrainer scores the completions through the same head (grpo_trainer.py, 1.16.0:
  // add_fused_lm_head with log_probs and entropy).
  if (settings.recipe == Recipe::kGrpo) return kTrlFusedHead;
  if (settings.stack != Stack::kHfTrainer || !transformers) return std::nullopt;
  return *transformers < Release{4, 49, 0} ? kUpcastShift : kFull;
}

// litgpt's loss follows its finetune script: full.py over the whole logits, lora.py
// (LoRA and QLoRA) over lm_head's 128-token chunks (litgpt 0.5.13 finetune/full.py,
// lora.py fit).
std::optional<LossSpec> script_loss(const RunSettings& settings) {
  if (settings.stack != Stack::kLitgpt) return std::nullopt;
  return settings.mode == TrainMode::kFull ? kLitgptFull : kLitgptLora;
}

// PEFT makes LoRA adapters in the base weight's dtype before 0.12 (lora/layer.py
// update_layer: self.to(weight.device, dtype=weight.dtype) for a floating weight),
// fp32 from 0.12 (get_peft_model's autocast_adapter_dtype=True). A 4-bit base
// weight is not floating: its adapters stay fp32 either way.
// TRL's SFTTrainer from 0.26 casts QLoRA's trainable parameters to bf16 after
// get_peft_model (trl/trainer/sft_trainer.py, 0.26.0 to 1.16.0: `param.data =
// param.data.to(torch.bfloat16)` for a model loaded in 4 or 8 bits).
std::optional<AdapterDtype> adapters_by_release(const RunSettings& settings) {
  const std::optional<Release> trl = release_of(settings.versions, "trl");
  if (settings.stack == Stack::kHfTrainer && trl && *trl >= Release{0, 26, 0} && settings.mode == TrainMode::kQlora) {
    return AdapterDtype::kModel;
  }
  const std::optional<Release> peft = release_of(settings.versions, "peft");
  if (!peft || settings.mode != TrainMode::kLora || *peft >= Release{0, 12, 0}) return std::nullopt;
  return AdapterDtype::kModel;
}

}  // namespace

void resolve_optimizer_impl(const RunSettings& settings, ResolvedStack& out) {
  resolve_choice(settings.optimizer_impl ? settings.optimizer_impl : optimizer_by_release(settings),
                 row_of(settings.stack).optimizer, out.top.optimizer_impl, out.bottom.optimizer_impl, out.unknowns);
}

void resolve_loss(const RunSettings& settings, ResolvedStack& out) {
  std::optional<LossSpec> loss = settings.loss ? settings.loss : loss_by_release(settings);
  if (!loss) loss = script_loss(settings);
  resolve_choice(loss, row_of(settings.stack).loss, out.top.loss, out.bottom.loss, out.unknowns);
}

// Without checkpointing, how a checkpointed block recomputes cannot matter.
void resolve_recompute(const RunSettings& settings, ResolvedStack& out) {
  const bool checkpoints = settings.checkpointing != CheckpointPolicy::kNone;
  resolve_choice(settings.recompute, row_of(settings.stack).recompute, out.top.recompute, out.bottom.recompute,
                 out.unknowns, checkpoints);
}

// The adapters' dtype changes bytes only where precision would otherwise make
// them 16-bit: LoRA under pure bf16 (DeepSpeed-style mixed precision casts the
// module to 16 bits and keeps fp32 masters either way).
// DeepSpeed's engine casts the module to 16 bits after PEFT made the adapters
// fp32 (runtime/engine.py _configure_distributed_model: module.bfloat16()). At
// ZeRO-3 it no longer does for a model built under ZeRO-Init, as the Trainer
// builds it (_cast_module_mixed_precision, DeepSpeed 0.19.2, b919284ab): the
// stack's adapters stand there.
void resolve_adapter_dtype(const RunSettings& settings, ResolvedStack& out) {
  const bool adapters_matter = settings.mode != TrainMode::kFull && settings.precision == Precision::kBf16Pure;
  const bool engine_casts = through_deepspeed_engine(settings) && settings.zero_stage < 3;
  resolve_choice(settings.adapter_dtype ? settings.adapter_dtype : adapters_by_release(settings),
                 row_of(settings.stack).adapters, out.top.adapter_dtype, out.bottom.adapter_dtype, out.unknowns,
                 adapters_matter && !engine_casts);
  if (engine_casts && !settings.adapter_dtype) out.top.adapter_dtype = out.bottom.adapter_dtype = AdapterDtype::kModel;
}

// SDPA over grouped K/V. transformers before 4.54 copies K and V to every head
// (repeat_kv, in the attention module and then integrations/sdpa_attention.py); from
// 4.54 sdpa_attention_forward passes enable_gqa when use_gqa_in_sdpa holds (torch >=
// 2.5 and no attention mask, as for unpadded batches). torchtitan runs its own
// attention as headroom builds it.
void resolve_repeat_kv(const RunSettings& settings, ResolvedStack& out) {
  if (settings.repeat_kv) {
    out.top.repeat_kv = out.bottom.repeat_kv = *settings.repeat_kv;
    return;
  }
  // torchtune's MultiHeadAttention expands K and V to every head before SDPA or flex
  // attention (modules/attention.py: k.unsqueeze(2).expand(...).flatten(1, 2), 0.6.1;
  // the meta-device oracle, env tt).
  if (settings.stack == Stack::kTorchtune) {
    out.top.repeat_kv = out.bottom.repeat_kv = settings.attention != models::AttentionImpl::kEager;
    return;
  }
  // litgpt's CausalSelfAttention copies K and V to every query head before SDPA
  // (litgpt/model.py CausalSelfAttention.forward: k.repeat_interleave(q_per_kv, dim=1), 0.5.13).
  if (settings.stack == Stack::kLitgpt) {
    out.top.repeat_kv = out.bottom.repeat_kv = true;
    return;
  }
  // Unsloth's attention (unsloth/utils/attention_dispatch.py run_attention) hands SDPA the
  // grouped K and V (enable_gqa) and flash-attn takes them as they are; its xformers path
  // expands them (priced by mechanisms/unsloth_model.h, not here).
  if (settings.stack == Stack::kUnsloth) return;
  if (!runs_transformers_models(settings.stack) || settings.attention != models::AttentionImpl::kSdpa) return;
  if (const std::optional<Release> transformers = release_of(settings.versions, "transformers")) {
    out.top.repeat_kv = out.bottom.repeat_kv = *transformers < Release{4, 54, 0};
    return;
  }
  out.top.repeat_kv = true;
  out.repeat_kv_open = true;
}

// RoPE's caches (models/rope_caches.h). transformers before 4.45 builds a rotary
// module in every Qwen2 and GPT-NeoX attention layer, caching cos and sin over
// max_position_embeddings (4.44.2 modeling_qwen2.py Qwen2RotaryEmbedding
// ._set_cos_sin_cache); 4.45.0 computes them per forward in one module of the model.
// torchtune's builders keep an fp32 cache, its lora_ builders one per layer
// (models/qwen2/_component_builders.py lora_qwen2_self_attention, 0.6.1).
void resolve_rope_modules(const RunSettings& settings, ResolvedStack& out) {
  using models::RopeModules;
  const bool torchtune = settings.stack == Stack::kTorchtune;
  // litgpt and torchtitan run rotary modules of their own, outside this mechanism.
  if (!torchtune && !runs_transformers_models(settings.stack)) return;
  const auto modules = [&](bool per_layer) {
    if (torchtune) return per_layer ? RopeModules::kTorchtuneLora : RopeModules::kTorchtune;
    return per_layer ? RopeModules::kTransformersCached : RopeModules::kPerForward;
  };
  std::optional<bool> per_layer = settings.layer_rope_caches;
  const std::optional<Release> transformers = release_of(settings.versions, "transformers");
  if (!per_layer && torchtune) per_layer = settings.mode != TrainMode::kFull;
  if (!per_layer && transformers) per_layer = *transformers < Release{4, 45, 0};
  // An open release: the top keeps the caches, the bottom does not.
  out.top.rope_modules = modules(per_layer.value_or(true));
  out.bottom.rope_modules = modules(per_layer.value_or(false));
  out.layer_rope_caches_open = !per_layer.has_value();
}

// Liger's kernels are what the user switched on (the Trainer's use_liger_kernel, or
// apply_liger_kernel_to_* by hand); no stack turns them on by itself.
void resolve_liger_kernels(const RunSettings& settings, ResolvedStack& out) {
  out.top.liger_kernels = out.bottom.liger_kernels = settings.liger_kernels.value_or(false);
}

// Whether torch.compile covers the loss as well as the blocks. Eager is the top
// of the band (the fp32 log-probabilities and their gradients are what compile
// removes); a loss the stack leaves open is priced both ways.
void resolve_compile_loss(const RunSettings& settings, ResolvedStack& out) {
  if (!settings.compile) return;  // eager: nothing is compiled
  if (settings.compile_loss) {
    out.top.compile_loss = out.bottom.compile_loss = *settings.compile_loss;
    return;
  }
  switch (settings.stack) {
    case Stack::kTorchtune:
      // training.compile_loss compiles CEWithChunkedOutputLoss in place
      // (compute_cross_entropy) but returns a new module for any other loss, and
      // the recipes drop that return value (full_finetune_single_device.py, 1814feb
      // to bd2a0fc): only the chunked loss is compiled.
      out.top.compile_loss = out.top.loss.impl == LossImpl::kChunked;
      out.bottom.compile_loss = out.bottom.loss.impl == LossImpl::kChunked;
      return;
    case Stack::kLitgpt:
      // litgpt compiles the model; chunked_cross_entropy runs outside it (pretrain.py).
      return;
    case Stack::kHfTrainer:
      // Trainer(torch_compile=True) compiles the whole model, whose forward computes
      // the loss (transformers' causal-LM heads call self.loss_function).
      out.top.compile_loss = out.bottom.compile_loss = true;
      return;
    case Stack::kTorchtitan:
      // components/loss.py compiles cross_entropy_loss with --training.compile since
      // bbb1b616e (2025-04-02); from e8977b007 (2024-12-18) until then it was off.
      out.bottom.compile_loss = true;
      out.unknowns.emplace_back("whether the loss is compiled with the model: torchtitan since 2025-04 "
                                "(bbb1b616e) compiles it under --training.compile, earlier builds did not "
                                "(give --compile-loss)");
      return;
    default:
      // A compiled model whose forward computes the loss (transformers' causal-LM heads)
      // compiles it too; a loop that calls the loss outside does not.
      out.bottom.compile_loss = true;
      out.unknowns.emplace_back("whether torch.compile covers the loss (give --compile-loss)");
      return;
  }
}

// Whether FSDP accumulates the micro-steps before the last unsharded, in no_sync().
// The Trainer wraps every micro-batch but the last in accelerator.no_sync
// (transformers trainer.py _inner_training_loop), as Accelerate's accumulate() does
// unless sync_each_batch (accelerator.py accumulate). torchtune's and torchtitan's
// loops call backward every micro-step with sync on (full_finetune_distributed.py,
// torchtitan train.py), Composer enters no_sync only for DDP (trainer.py
// _train_microbatches), and MMEngine's FSDP wrapper leaves backward outside its
// no_sync (fully_sharded_distributed.py train_step). litgpt's finetune and pretrain
// scripts run every micro-step but the last in fabric.no_backward_sync
// (litgpt/finetune/lora.py, full.py at 2685705: FSDP1's no_sync, FSDP2's
// set_requires_gradient_sync(False)). An unspecified stack is priced both ways; the
// top is no_sync (every unsharded gradient kept).
void resolve_fsdp_no_sync(const RunSettings& settings, ResolvedStack& out) {
  if (settings.fsdp_no_sync) {
    out.top.fsdp_no_sync = out.bottom.fsdp_no_sync = *settings.fsdp_no_sync;
    return;
  }
  switch (settings.stack) {
    case Stack::kHfTrainer:
    case Stack::kLitgpt: out.top.fsdp_no_sync = out.bottom.fsdp_no_sync = true; return;
    case Stack::kUnspecified: {
      out.top.fsdp_no_sync = true;
      out.bottom.fsdp_no_sync = false;
      if (fsdp_shards_params(settings, settings.zero_stage) && settings.accumulates()) {
        out.unknowns.emplace_back("whether FSDP accumulates gradients unsharded under no_sync (Accelerate, the "
                                  "Trainer) or reduce-scatters every micro-step (torchtune, torchtitan, Composer; "
                                  "give --fsdp-no-sync)");
      }
      return;
    }
    default: out.top.fsdp_no_sync = out.bottom.fsdp_no_sync = false; return;
  }
}

// What a QLoRA script does to the unquantized parameters before training. The
// Trainer never does anything itself (no prepare_model_for_kbit_training in
// transformers); the script does, or TRL's SFTTrainer (prepare_model_for_kbit_training
// from 0.4 to 0.24, with peft_module_casting_to_bf16 putting the embeddings and
// output layer back to bf16 from 0.7.5 when bf16; its own norms-only copy in 0.25;
// nothing from 0.26). DeepSpeed's engine casts the module to 16 bits afterwards,
// torchtune, litgpt, torchtitan and Composer do not use PEFT. It matters only for
// bitsandbytes NF4 under pure bf16 with the Trainer's autocast: AMP and fp32 runs
// are fp32 already, and PEFT leaves GPTQ models alone (peft/utils/other.py,
// is_gptq_quantized).
void resolve_kbit_prep(const RunSettings& settings, ResolvedStack& out) {
  if (settings.kbit_prep) {
    out.top.kbit_prep = out.bottom.kbit_prep = *settings.kbit_prep;
    return;
  }
  switch (settings.stack) {
    case Stack::kHfTrainer:
    case Stack::kUnspecified: {
      out.top.kbit_prep = KbitPrep::kPeft;
      out.bottom.kbit_prep = KbitPrep::kNone;
      if (kbit_prep_matters(settings)) {
        out.unknowns.emplace_back("what the script does to the weights bitsandbytes left unquantized: PEFT's "
                                  "prepare_model_for_kbit_training makes them fp32 (the PEFT docs, TRL before 0.26), "
                                  "TRL 0.7.5-0.25 upcasts only the norms, axolotl and TRL 0.26 keep them as loaded "
                                  "(give --kbit-prep)");
      }
      return;
    }
    default: out.top.kbit_prep = out.bottom.kbit_prep = KbitPrep::kNone; return;
  }
}

// Whether the forward runs under torch.autocast over the 16-bit weights.
// Accelerate wraps model.forward in autocast whenever mixed_precision is bf16 or
// fp16, except under DeepSpeed and Megatron (accelerator.py: native_amp, and
// prepare_model's autocast_context); transformers' Trainer and the diffusers
// training scripts go through it. Composer runs amp_bf16 as torch.autocast
// (composer/core/precision.py get_precision_context). torchtune, litgpt (Fabric's
// bf16-true: a default-dtype context, no autocast), torchtitan (FSDP2's
// MixedPrecisionPolicy), DeepSpeed (the engine's module.bfloat16()) and a plain
// loop over a bf16 model run no autocast. Unspecified: priced both ways, the top
// under autocast (fp32 LayerNorm outputs and per-matmul casts only add bytes).
void resolve_autocast(const RunSettings& settings, ResolvedStack& out) {
  if (settings.autocast) {
    out.top.autocast = out.bottom.autocast = *settings.autocast;
    return;
  }
  // A QLoRA preparation pinned by the user is modelled under the Trainer's
  // autocast only (validate_settings refuses it with autocast off).
  if (settings.kbit_prep && *settings.kbit_prep != KbitPrep::kNone && kbit_prep_matters(settings)) {
    out.top.autocast = out.bottom.autocast = true;
    return;
  }
  // Accelerate leaves DeepSpeed's engine to run the module in its own 16 bits.
  if (through_deepspeed_engine(settings)) {
    out.top.autocast = out.bottom.autocast = false;
    return;
  }
  switch (settings.stack) {
    case Stack::kHfTrainer: out.top.autocast = out.bottom.autocast = true; return;
    // Unsloth runs the Trainer's step (Accelerate's autocast under bf16=True); its
    // kernels' custom_fwd keeps the autocast state as it is (kernels/utils.py).
    case Stack::kUnsloth: out.top.autocast = out.bottom.autocast = true; return;
    case Stack::kComposer: out.top.autocast = out.bottom.autocast = true; return;
    case Stack::kUnspecified:
      out.top.autocast = true;
      out.bottom.autocast = false;
      if (autocast_matters(settings)) {
        out.unknowns.emplace_back("whether the forward runs under torch.autocast over the bf16 weights (the "
                                  "Trainer, Accelerate and diffusers scripts do: LayerNorm and softmax in fp32, "
                                  "fp32 adapters cast per matmul; torchtune and litgpt do not; give --autocast)");
      }
      return;
    default: out.top.autocast = out.bottom.autocast = false; return;
  }
}

// transformers' Trainer turns checkpointing on with gradient_checkpointing_enable,
// which from 5.x calls enable_input_require_grads() when the model's
// main_input_name is "input_ids" (modeling_utils.py `_activation_checkpointing_enable`,
// 5.23.0: `needs_embedding_grads = self.main_input_name == "input_ids"`); 4.x did
// only for an adapter loaded through transformers' own PEFT integration
// (`_hf_peft_config_loaded`, 4.44.2), not for a PeftModel. 5.x calls it whatever
// trains; it changes bytes only where an input embedding is frozen (LoRA, QLoRA, or a
// full fine-tune with --freeze: Qwen2.5-VL's recipes freeze the vision tower, whose
// patch_embed is hooked) and blocks are checkpointed. No release given: 5.x's, the dearer.
void resolve_input_require_grads(const RunSettings& settings, ResolvedStack& out) {
  if (settings.input_require_grads) {
    out.top.input_require_grads = out.bottom.input_require_grads = *settings.input_require_grads;
    return;
  }
  // Unsloth's prepare_model_for_kbit_training calls prepare_model_for_training with
  // use_reentrant=True, which calls model.enable_input_require_grads() whether or not it
  // checkpoints (unsloth/models/_utils.py, unsloth_zoo/training_utils.py).
  if (settings.stack == Stack::kUnsloth) {
    out.top.input_require_grads = out.bottom.input_require_grads = true;
    return;
  }
  const bool applies = settings.stack == Stack::kHfTrainer && settings.checkpointing != CheckpointPolicy::kNone;
  const std::optional<Release> transformers = release_of(settings.versions, "transformers");
  out.top.input_require_grads = out.bottom.input_require_grads =
      applies && (!transformers || *transformers >= Release{5, 0, 0});
}

// Where the loop frees the gradients. The stacks free them after the optimizer step
// or before the forward: transformers' Trainer (`model.zero_grad()` after
// `optimizer.step()`), torchtune and litgpt (`zero_grad` after `step`), torchtitan
// (`zero_grad` at the start of `train_step`), the diffusers scripts and DeepSpeed's
// engine (`step` zeroes). A plain loop may call it between the loss and backward(),
// as torchvision's classification reference does (references/classification/train.py
// `train_one_epoch`); a plain loop is priced as PyTorch's tutorials and torchao's
// optimizer benchmarks write it, zero_grad after the step (a band's top here moved the
// published torchao ViT-H runs from -0.4% to +19%), and the other order is a flag.
// Nothing survives a step whose gradients are freed in backward.
void resolve_grads_through_forward(const RunSettings& settings, ResolvedStack& out) {
  const bool on = settings.grads_through_forward.value_or(false) && out.top.optimizer_impl != OptimizerImpl::kInBackward;
  out.top.grads_through_forward = out.bottom.grads_through_forward = on;
}

// The recipe is what the user or the config says; supervised by default.
void resolve_recipe(const RunSettings& settings, ResolvedStack& out) {
  out.top.recipe = out.bottom.recipe = settings.recipe.value_or(Recipe::kSupervised);
}

// DPOTrainer.__init__ (trl/trainer/dpo_trainer.py, 1.16.0): without a ref_model, a PEFT
// policy is its own reference with the adapters disabled, and otherwise TRL loads a
// second copy of the model (create_model_from_path in the policy's dtype).
// GRPOTrainer.__init__ (grpo_trainer.py, 1.16.0) loads no reference at beta 0, its default;
// at beta != 0 a PEFT policy is its own reference with the adapters disabled and any other
// gets a frozen copy, whichever of the two was given (TRL decides by is_peft_model).
void resolve_reference(const RunSettings& settings, ResolvedStack& out) {
  if (settings.recipe == Recipe::kGrpo) {
    Reference reference = settings.reference.value_or(kGrpoDefaultReference);
    if (reference == Reference::kCopy || reference == Reference::kAdapterDisabled) {
      reference = settings.mode == TrainMode::kFull ? Reference::kCopy : Reference::kAdapterDisabled;
    }
    out.top.reference = out.bottom.reference = reference;
    return;
  }
  const Reference by_mode = settings.mode == TrainMode::kFull ? Reference::kCopy : Reference::kAdapterDisabled;
  out.top.reference = out.bottom.reference = settings.reference.value_or(by_mode);
}

// GRPOConfig.use_vllm defaults to False (trl/trainer/grpo_config.py, 1.16.0): transformers'
// generate unless the run names vLLM.
void resolve_generation(const RunSettings& settings, ResolvedStack& out) {
  out.top.generation = out.bottom.generation = settings.generation.value_or(Generation::kGenerate);
}

}  // namespace headroom::planner
