#include "planner/predict/model_context.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <system_error>

#include "graph/graph_json.h"
#include "planner/configs/hf_quantization_check.h"
#include "models/zoo.h"
#include "planner/mechanisms/autocast.h"
#include "planner/mechanisms/clip_projection_order.h"
#include "planner/mechanisms/output_fp32_copies.h"
#include "planner/settings/run_gpu.h"
#include "planner/settings/validate_settings.h"
#include "planner/settings/validate_unsloth.h"
#include "planner/time/calibration.h"
#include "planner/mechanisms/compiled_blocks.h"
#include "planner/mechanisms/document_mask.h"
#include "planner/mechanisms/float8_linear.h"
#include "planner/mechanisms/fsdp_16_bit_gather.h"
#include "planner/mechanisms/gathered_adapters.h"
#include "planner/mechanisms/fused_kernels.h"
#include "planner/mechanisms/unsloth_model.h"
#include "planner/mechanisms/liger_kernels.h"
#include "planner/mechanisms/input_require_grads.h"
#include "planner/mechanisms/t5_position_bias.h"
#include "planner/predict/bnb_matmul4bit_of.h"
#include "planner/mechanisms/kbit_prep.h"
#include "planner/mechanisms/reentrant_checkpoint.h"
#include "planner/mechanisms/litgpt_model.h"
#include "planner/mechanisms/embedding_hold.h"
#include "planner/mechanisms/loss_variants.h"
#include "planner/mechanisms/trl_fused_head.h"
#include "planner/mechanisms/preference_pairs.h"
#include "planner/mechanisms/kv_cache.h"
#include "planner/settings/grpo_settings.h"
#include "planner/mechanisms/reward_head.h"
#include "planner/mechanisms/selective_checkpoint.h"
#include "planner/predict/loaded_models.h"
#include "planner/predict/moe_notes.h"
#include "planner/mechanisms/strided_slices.h"
#include "planner/settings/bnb_release.h"
#include "planner/settings/stack.h"
#include "planner/mechanisms/trainability.h"
#include "planner/mechanisms/zero3_linear.h"

namespace headroom::planner {
namespace {

// Each name in fsdp_own_groups must be a block outside the layers: the layers
// have their own fully_shard already.
Status check_fsdp_own_groups(const graph::LayerGraph& graph, const RunSettings& settings) {
  for (const std::string& pattern : settings.fsdp_own_groups) {
    std::string outside;  // the non-layer blocks, for the message
    bool matched = false;
    for (const graph::Block& block : graph.blocks) {
      if (block.checkpointable) continue;
      outside += (outside.empty() ? "\"" : ", \"") + block.name + "\"";
      matched = matched || name_matches(pattern, block.name);
    }
    if (!matched) {
      return Status::invalid_input("fsdp_own_groups: \"" + pattern + "\" matches no block of " +
                                   graph.name + " outside its layers (expected one of " + outside +
                                   ")");
    }
  }
  return Status::ok();
}

bool looks_like_path(const std::string& model) {
  return model.find('/') != std::string::npos || model.ends_with(".json");
}

graph::DType compute_dtype_for(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return graph::DType::kF32;
    case Precision::kFp16Mixed:
    case Precision::kFp16Amp: return graph::DType::kF16;
    case Precision::kBf16Amp:
    case Precision::kBf16Mixed:
    case Precision::kBf16Pure: return graph::DType::kBF16;
  }
  return graph::DType::kBF16;
}

Result<int64_t> resolve_seq_len(const graph::LayerGraph& graph, const RunSettings& settings) {
  const graph::SequenceSpec& spec = graph.sequence;
  int64_t seq = spec.default_seq;
  // A token model with a patch size took --resolution when it was built (Qwen2.5-VL:
  // ZooOptions::image_side); its image takes extra_tokens of S.
  const bool built_at_resolution = spec.unit == "tokens" && spec.patch_px > 0;
  if (settings.resolution > 0 && !built_at_resolution) {
    if (spec.unit != "image") {
      return Status::invalid_input("resolution: " + graph.name +
                                   " takes a sequence length (--seq), not an image resolution");
    }
    if (settings.resolution % spec.patch_px != 0) {
      return Status::invalid_input("resolution: expected a multiple of the patch size " +
                                   std::to_string(spec.patch_px) + " px for " + graph.name +
                                   ", got " + std::to_string(settings.resolution));
    }
    const int64_t side = settings.resolution / spec.patch_px;
    seq = spec.images * side * side + spec.extra_tokens;
  } else if (settings.seq_len > 0) {
    seq = settings.seq_len;
  }
  if (spec.unit == "tokens" && seq <= spec.extra_tokens) {
    return Status::invalid_input("seq_len: " + std::to_string(seq) + " tokens leave no text beside the " +
                                 std::to_string(spec.extra_tokens) + " image tokens of " + graph.name +
                                 " (S counts the whole LM sequence, image tokens included); expected more than " +
                                 std::to_string(spec.extra_tokens));
  }
  if (seq > spec.max_seq) {
    return Status::invalid_input("seq_len: " + std::to_string(seq) +
                                 " tokens exceed the maximum of " + graph.name + " (" +
                                 std::to_string(spec.max_seq) + ")");
  }
  return seq;
}

}  // namespace

int64_t context_bytes(const ModelContext& context, const RunSettings& settings) {
  if (settings.cuda_context_bytes) return *settings.cuda_context_bytes;
  return context.measured_context_bytes.value_or(context.gpu.cuda_context_bytes);
}

int64_t gpu_budget_bytes(const ModelContext& context, const RunSettings& settings) {
  const double capacity = static_cast<double>(context.gpu.memory_bytes);
  return static_cast<int64_t>(std::floor(capacity * (1.0 - settings.safety_margin)));
}

int64_t allocator_budget(const ModelContext& context, const RunSettings& settings) {
  return gpu_budget_bytes(context, settings) - context_bytes(context, settings);
}

bool sizes_in_range(const ModelContext& context, int64_t micro_batch, int64_t seq) {
  // Each tensor: itself, its gradient and a transient copy, at its own width or fp32.
  constexpr double kTensorCopies = 3.0;
  // Each parameter: weight, gradient, two AdamW moments, an fp32 master (at most 4 bytes each).
  constexpr double kParameterBytes = 20.0;
  double total = 0;
  for (const graph::Tensor& tensor : context.graph.tensors) {
    const std::optional<int64_t> elements = tensor.elements.eval(micro_batch, seq);
    if (!elements) return false;
    total += static_cast<double>(*elements) * graph::dtype_bits(tensor.dtype.value_or(graph::DType::kF32)) / 8.0 *
             kTensorCopies;
  }
  for (const graph::Node& node : context.graph.nodes) {
    const std::optional<int64_t> workspace = node.workspace_elements.eval(micro_batch, seq);
    if (!workspace) return false;
    total += static_cast<double>(*workspace) * 4.0;
    for (const graph::Param& param : node.params) total += static_cast<double>(param.elements()) * kParameterBytes;
  }
  return total < kMaxPredictedBytes;
}

RunSettings settings_for_plan(const RunSettings& settings) {
  RunSettings out = settings;
  const auto absolute = [](const std::string& path) {
    std::error_code error;
    const std::filesystem::path full = std::filesystem::absolute(path, error);
    return error ? path : full.lexically_normal().string();
  };
  if (looks_like_path(out.model)) out.model = absolute(out.model);
  if (!out.calibration_file.empty()) out.calibration_file = absolute(out.calibration_file);
  return out;
}

namespace {

// Whether the stack's RMSNorm keeps the normalized tensor in fp32. litgpt's
// RMSNorm.forward normalizes x.float() and multiplies it by weight.float() before
// casting back (litgpt/model.py, 0.5.13). torchtune's does from 0.5.0
// (torchtune/modules/rms_norm.py, PR #2054: F.rms_norm(x.float(), weight=self.scale),
// which torch's rms_norm_symint sends to rms_norm_composite when the weight's dtype
// differs from the input's, aten/src/ATen/native/layer_norm.cpp). An unknown release
// is priced as the current one, which is also the more expensive.
bool norm_in_fp32(const RunSettings& settings) {
  if (settings.stack == Stack::kLitgpt) return true;
  if (settings.stack != Stack::kTorchtune) return false;
  const std::optional<Release> release = release_of(settings.versions, "torchtune");
  return !release || *release >= Release{0, 5, 0};
}


// Before transformers 5.0 T5's lm_head is tied only when config.json says so; 5.x's
// T5Config ties it always (configuration_t5.py 5.23.0 __post_init__; models/t5.h).
bool t5_ties_as_configured(const RunSettings& settings) {
  const std::optional<Release> release = release_of(settings.versions, "transformers");
  return release && *release < Release{5, 0, 0};
}

// transformers 5.x projects CLIP's image inside the vision tower's call
// (mechanisms/clip_projection_order.h); an unknown release is priced as the current one.
// headroom's own executor (the unspecified stack) projects both towers in its head, as
// transformers 4.x does (models/torch/clip_module.cc, ClipModelImpl's head_).
bool clip_projects_in_tower(const RunSettings& settings) {
  if (settings.stack == Stack::kUnspecified) return false;
  const std::optional<Release> release = release_of(settings.versions, "transformers");
  return !release || *release >= Release{5, 0, 0};
}

// The model's layer graph from MODEL: a Hugging Face directory or config.json
// (its stored quantization checked against the run), a layer-graph file, a
// torchtune component, or a zoo name; refused beyond kMaxBlocks blocks.
Result<graph::LayerGraph> load_model_graph(const RunSettings& settings, const ResolvedStack& stack,
                                           ModelContext& context) {
  Result<graph::LayerGraph> loaded = [&]() -> Result<graph::LayerGraph> {
    models::ZooOptions options;
    options.attention = settings.attention;
    // Before 4.54 transformers copies grouped K and V to every head for SDPA (the
    // band's top when the release is open; settings/stack.cc resolve_repeat_kv).
    options.sdpa_repeat_kv = stack.top.repeat_kv;
    // Whose rotary modules, for their RoPE caches (settings/stack.cc resolve_rope_modules).
    options.rope_modules = stack.top.rope_modules;
    options.rms_norm_f32_normalized = norm_in_fp32(settings);
    options.dropout = settings.dropout;
    // Before transformers 5.0 each expert is its own nn.Linear modules (models/moe_loop.h).
    options.expert_modules = experts_as_modules(settings);
    options.precomputed_text_embeddings = settings.precomputed_text_embeddings;
    options.text_tokens = settings.text_tokens;
    options.target_tokens = settings.target_tokens;
    options.t5_tie_as_configured = t5_ties_as_configured(settings);
    if (settings.resolution > 0) options.image_side = settings.resolution;
    Result<LoadedModel> model = load_model(settings.model, looks_like_path(settings.model), options);
    if (!model.is_ok()) return model.status();
    if (model->from_hf) {
      if (Status stored = check_hf_quantization(settings, model->quantization, model->config_path); !stored.is_ok()) {
        return stored;
      }
      context.checkpoint_mismatches = std::move(model->mismatches);
    }
    return std::move(model->graph);
  }();
  if (!loaded.is_ok()) return loaded.status();
  if (loaded->blocks.size() > kMaxBlocks) {
    return Status::unsupported(
        "model: " + loaded->name + " has " + std::to_string(loaded->blocks.size()) +
        " blocks, more than the " + std::to_string(kMaxBlocks) +
        " headroom plans for (the largest published models have under 130 layers; expected a "
        "model of at most " +
        std::to_string(kMaxBlocks) + " blocks)");
  }
  if (settings.target_tokens && loaded->family != "t5") {
    return Status::invalid_input("target_tokens: " + loaded->name + " (" + loaded->family +
                                 ") is not an encoder-decoder model; expected target_tokens (--target-seq) only for "
                                 "a T5 model, whose decoder runs a second sequence");
  }
  // train_dreambooth_lora_sd3.py keeps its three text encoders (CLIP-L, CLIP-G, T5-XXL)
  // only for per-image prompts or --train_text_encoder; headroom builds the transformer alone.
  // SDXL's resident VAE and text encoders are built (models/sdxl_encoders.h).
  if (!settings.precomputed_text_embeddings && loaded->family == "sd3") {
    return Status::unsupported(
        "precomputed_text_embeddings: false is not modelled for sd3 (its text encoders resident: CLIP-L, CLIP-G "
        "and T5-XXL); expected true, the training script's own case for one instance prompt");
  }
  if (settings.text_tokens && loaded->family != "flux" && loaded->family != "sd3") {
    return Status::invalid_input(
        "text_tokens: " + loaded->name + " (" + loaded->family +
        ") has no T5 text input; expected text_tokens only for a Flux or SD3 model");
  }
  return loaded;
}

// DPOConfig.disable_dropout and RewardConfig.disable_dropout (True by default) set every
// nn.Dropout's p to 0, PEFT's lora_dropout among them (dpo_trainer.py and
// reward_trainer.py, 1.16.0: disable_dropout_in_model).
RunSettings without_trl_dropout(const RunSettings& settings, const ResolvedStack& stack) {
  RunSettings out = settings;
  if (stack.top.recipe == Recipe::kDpo || stack.top.recipe == Recipe::kReward) {
    out.lora.dropout = 0;
    for (ScopedLora& scoped : out.scoped_lora) scoped.lora.dropout = 0;
  }
  return out;
}

// What trains: the training mode (LoRA/QLoRA) on the loaded graph, the
// input-gradient hook, and what reentrant checkpointing leaves untrained.
Status apply_trainability(const graph::LayerGraph& loaded, const RunSettings& settings, const ResolvedStack& stack,
                          ModelContext& context) {
  // litgpt builds its own GPT, whose lm_head is never tied to the embedding
  // (mechanisms/litgpt_model.h). Reward modelling loads the model with a `score` head
  // in place of the LM head (mechanisms/reward_head.h), before LoRA finds its targets.
  const bool reward = stack.top.recipe == Recipe::kReward;
  // torchtune's and litgpt's own decoders hold no embedding output to the final norm
  // (mechanisms/embedding_hold.h).
  const bool own_decoder = settings.stack == Stack::kLitgpt || settings.stack == Stack::kTorchtune;
  graph::LayerGraph rewritten;
  if (own_decoder || reward) rewritten = loaded;
  if (own_decoder) release_embedding_hold(rewritten);
  if (settings.stack == Stack::kLitgpt) {
    untie_output_head(rewritten);
    copy_merged_heads(rewritten);
  }
  if (reward) {
    if (Status status = apply_reward_head(rewritten); !status.is_ok()) return status.with_prefix("recipe reward: ");
  }
  const bool own = own_decoder || reward;
  Result<graph::LayerGraph> trained = apply_training_mode(own ? rewritten : loaded, without_trl_dropout(settings, stack));
  if (!trained.is_ok()) return trained.status();
  context.graph = std::move(trained.value());
  if (clip_projects_in_tower(settings)) apply_clip_projection_in_tower(context.graph);
  // DPO and reward modelling: a chosen and a rejected row per sample, before any rewrite
  // sized at the micro-batch.
  const bool pairs = stack.top.recipe == Recipe::kDpo || stack.top.recipe == Recipe::kReward;
  if (pairs) apply_preference_pairs(context.graph);
  if (settings.stack == Stack::kLitgpt) fuse_qkv_adapters(context.graph);
  if (stack.top.input_require_grads) apply_input_require_grads(context.graph);
  // The Trainer's gradient_checkpointing_enable sets T5Attention.gradient_checkpointing,
  // whatever blocks it checkpoints (mechanisms/t5_position_bias.h).
  if (settings.stack == Stack::kHfTrainer && settings.checkpointing != CheckpointPolicy::kNone) {
    apply_t5_bias_leaves(context.graph);
  }
  // PEFT's prepare_model_for_kbit_training(use_gradient_checkpointing=True) hooks the
  // input embeddings too (peft utils/other.py), so gradients reach every block.
  const bool kbit_hook = settings.mode == TrainMode::kQlora && stack.top.kbit_prep == KbitPrep::kPeft;
  if (stack.top.recompute == Recompute::kBlockReentrant && settings.checkpointing == CheckpointPolicy::kEveryBlock &&
      !kbit_hook) {
    std::vector<bool> checkpointed;
    for (const graph::Block& block : context.graph.blocks) checkpointed.push_back(block.checkpointable);
    apply_reentrant_checkpointing(context.graph, checkpointed);
  }
  return Status::ok();
}

// Autocast as the stack runs it, over an fp32 model or a 16-bit one, and what follows
// from the dtypes it sets: the fp32 adapters, Accelerate's fp32 copies of the outputs.
void apply_autocast_mechanisms(const RunSettings& settings, const ResolvedStack& stack, graph::LayerGraph& graph) {
  if (is_autocast(settings.precision)) {
    apply_autocast(graph, AutocastWeights::kFp32Model, compute_dtype_for(settings.precision));
    if (stack.top.loss.impl == LossImpl::kLitgptLora) cast_head_per_chunk(graph);
    if (settings.stack == Stack::kLitgpt) share_qkv_input_cast(graph);
  }
  // Autocast over the 16-bit model (the Trainer's, Accelerate's; the top of the
  // band when the stack leaves it open): fp32 LayerNorm and softmax outputs, the
  // weights the script upcast, then the fp32 adapters.
  if (autocast_matters(settings) && stack.top.autocast) {
    const auto rewrite = [&](graph::LayerGraph& g) {
      apply_autocast(g, AutocastWeights::kSixteenBitModel, compute_dtype_for(settings.precision));
      apply_autocast_to_fp32_adapters(g);
    };
    // Under FSDP's mixed precision the adapters are gathered, and computed on, in 16 bits.
    if (fsdp_gathers_in_16_bits(settings)) {
      with_adapters_as_gathered(graph, compute_dtype_for(settings.precision), rewrite);
    } else {
      rewrite(graph);
    }
  } else if (autocast_matters(settings) && !fsdp_gathers_in_16_bits(settings)) {
    apply_fp32_adapters_without_autocast(graph);
  }
  // After autocast, which sets the returned tensors' dtypes: Accelerate's fp32 copies of them.
  if (accelerate_copies_outputs(settings, stack.top)) {
    apply_output_fp32_copies(graph, compute_dtype_for(settings.precision));
  }
}

// Unsloth's patched model (mechanisms/unsloth_model.h), after the loss made the head the
// fused op and after autocast: its Triton RMSNorm, its fused LoRA Functions, the attention
// backend that keeps the most, and its fused loss's chunk at the run's tokens.
void apply_unsloth_model(const RunSettings& settings, const StackSpec& top, graph::LayerGraph& graph) {
  unsloth_fused_norms(graph);
  unsloth_fused_lora(graph);
  unsloth_attention_top(graph);
  const int64_t seq = settings.seq_len > 0 ? settings.seq_len : graph.sequence.default_seq;
  // 4 bytes a logit compiled (16-bit logits and gradient), 16 in the eager fallback.
  const int64_t bytes_per_logit = top.loss.impl == LossImpl::kUnslothFusedCeEager ? 16 : 4;
  unsloth_fused_ce_chunks(graph, settings.micro_batch * seq, bytes_per_logit);
}

// The stack's mechanisms, each a rewrite of the graph, in the order they
// compose: training mode (LoRA/QLoRA), loss, QLoRA preparation, autocast, fp8;
// then the graph's analysis and what selective checkpointing keeps. `stack`: the
// settings' resolve_stack, whose top each mechanism prices.
Status apply_mechanisms(const graph::LayerGraph& loaded, const RunSettings& settings, const ResolvedStack& stack,
                        ModelContext& context) {
  if (Status experts = refuse_unfused_experts(loaded, settings); !experts.is_ok()) return experts;
  if (settings.stack == Stack::kUnsloth) {
    if (Status family = check_unsloth_family(loaded.family, loaded.name); !family.is_ok()) return family;
  }
  if (Status trained = apply_trainability(loaded, settings, stack, context); !trained.is_ok()) return trained;
  // DeepSpeed's ZeRO-3 linear (mechanisms/zero3_linear.h) over its 16-bit linears. The
  // unspecified stack's ZeRO-3 is headroom's executor's, which keeps torch's linear.
  if (settings.zero_stage == 3 && !shards_with_fsdp(settings) && settings.mode != TrainMode::kQlora &&
      settings.stack != Stack::kUnspecified) {
    apply_zero3_linear(context.graph);
  }
  // The loss as the stack computes it; the top of the band when not pinned.
  // Rows per forward: DPO and reward modelling run chosen and rejected together.
  const bool pairs = stack.top.recipe == Recipe::kDpo || stack.top.recipe == Recipe::kReward;
  apply_loss_impl(context.graph, stack.top.loss, stack.top.compile_loss, is_autocast(settings.precision),
                  compute_dtype_for(settings.precision), settings.micro_batch * (pairs ? 2 : 1));
  if (stack.top.loss.impl == LossImpl::kTrlFusedHead) {
    const int64_t seq = settings.seq_len > 0 ? settings.seq_len : context.graph.sequence.default_seq;
    // GRPO scores the completion only (mechanisms/trl_fused_head.h).
    const std::optional<int64_t> scored =
        stack.top.recipe == Recipe::kGrpo ? std::optional<int64_t>(grpo_completion_tokens(settings)) : std::nullopt;
    apply_trl_fused_head(context.graph, settings.micro_batch, seq, compute_dtype_for(settings.precision), scored);
  }
  // After the loss: its head is the linear the loss reads.
  if (settings.stack == Stack::kLitgpt && settings.mode == TrainMode::kQlora) {
    litgpt_qlora(context.graph, settings.nf4_double_quant);
  }
  if (kbit_prep_matters(settings)) apply_kbit_prep(context.graph, stack.top.kbit_prep);
  apply_autocast_mechanisms(settings, stack, context.graph);
  // After autocast: its casts show which 4-bit linears are fed fp32. M of each one's
  // gemm_4bit is its rows at the run's micro-batch and sequence.
  const Result<int64_t> seq = resolve_seq_len(loaded, settings);
  const BnbMatmul4bit bnb = bnb_matmul4bit_of(settings, seq.is_ok() ? std::optional(seq.value()) : std::nullopt);
  if (uses_bnb_4bit(settings)) apply_bnb_matmul4bit(context.graph, bnb);
  apply_float8_linears(context.graph, Float8Options{settings.float8, settings.float8_all_gather},
                       compute_dtype_for(settings.precision));
  if (settings.stack == Stack::kUnsloth) apply_unsloth_model(settings, stack.top, context.graph);
  // Liger's RMSNorm and gated-MLP Functions, after autocast as Unsloth's kernels are.
  if (stack.top.liger_kernels) apply_liger_kernels(context.graph);
  // Slices strided over the batch are copied where a linear reads them (at the run's micro-batch).
  apply_strided_slice_copies(context.graph, settings.micro_batch);
  if (stack.top.recipe == Recipe::kGrpo) {
    if (Result<std::vector<int64_t>> kv = kv_cache_elements_per_token(context.graph); !kv.is_ok()) {
      return kv.status().with_prefix("recipe grpo: ");
    }
  }
  context.analysis = graph::analyze_graph(context.graph);
  if (Status groups = check_fsdp_own_groups(context.graph, settings); !groups.is_ok()) return groups;
  if (stack.top.recompute == Recompute::kSelectiveOp) {
    context.checkpoint_saves = selective_op_saves(context.graph, context.analysis);
  }
  hold_t5_bias_leaves(context.graph, context.analysis, context.checkpoint_saves, context.ctx_held);
  hold_input_grad_leaves(context.graph, context.analysis, context.ctx_held);
  if (uses_bnb_4bit(settings)) {
    hold_bnb_inputs(context.graph, context.analysis, bnb, context.checkpoint_saves);
    hold_bnb_inputs(context.graph, context.analysis, bnb, context.ctx_held);
  }
  return Status::ok();
}

// The run's GPU (catalogue or --gpu-file, --gpu-mem, its bf16), and whether it can run the run's fp8.
Status resolve_gpu(const RunSettings& settings, ModelContext& context) {
  Result<GpuSpec> gpu = run_gpu(settings);
  if (!gpu.is_ok()) return gpu.status();
  context.gpu = gpu.value();
  if (settings.float8 != Float8Recipe::kNone && context.gpu.fp8_tflops <= 0) {
    // torchao's Float8Linear runs torch._scaled_mm, which needs SM 8.9 or later
    // (torchtitan's Float8Handler refuses to convert below: _is_sm89_or_later).
    return Status::invalid_input("float8: " + context.gpu.name + " (" + context.gpu.architecture +
                                 ") has no fp8 tensor cores; expected an Ada or Hopper GPU for fp8 "
                                 "training, or float8 none");
  }
  return Status::ok();
}

// The sequence length, the padded batches' shortest sample and the document
// mask at it, and sizes the planner's int64 arithmetic holds.
Status resolve_sequence(const RunSettings& settings, ModelContext& context) {
  const Result<int64_t> seq = resolve_seq_len(context.graph, settings);
  if (!seq.is_ok()) return seq.status();
  context.seq_len = seq.value();
  if (settings.shortest_sample) {
    if (context.graph.sequence.unit == "image") {
      return Status::invalid_input("shortest_sample: " + context.graph.name +
                                   " takes images of one resolution, not samples of varied length; expected "
                                   "shortest_sample only for a token model");
    }
    if (*settings.shortest_sample > context.seq_len) {
      return Status::invalid_input("shortest_sample: expected at most the sequence length " +
                                   std::to_string(context.seq_len) + " (the longest a padded batch can be), got " +
                                   std::to_string(*settings.shortest_sample));
    }
  }
  if (settings.document_tokens) apply_document_mask(context.graph, *settings.document_tokens, context.seq_len);
  if (!sizes_in_range(context, settings.micro_batch, context.seq_len)) {
    return Status::unsupported(
        "micro_batch: " + std::to_string(settings.micro_batch) + " samples of " +
        std::to_string(context.seq_len) + " tokens of " + context.graph.name +
        " need more than 2^60 bytes (1 EiB), beyond what headroom computes exactly; expected a "
        "smaller micro-batch or sequence");
  }
  return Status::ok();
}

// The compute dtype, the compiled blocks (at the run's own shape) and the
// efficiencies of the time model: the GPU's published benchmarks, then a calibration file.
Status resolve_time_options(const RunSettings& settings, ModelContext& context) {
  context.compute_dtype = compute_dtype_for(settings.precision);
  // What the compiled blocks keep depends on tensor sizes: at the run's own shape.
  if (settings.compile) {
    apply_compiled_blocks(context.graph, context.analysis, context.compute_dtype, settings.micro_batch,
                          context.seq_len);
    context.time_options.fused =
        std::make_shared<const FusedKernels>(fuse_compiled_blocks(context.graph, context.analysis));
  }
  // A published matmul benchmark of this GPU replaces the default GEMM efficiency
  // (GpuSpec::matmul_efficiency: bf16 tensor-core rates, so 16-bit compute only);
  // a calibration file, below, overrides it.
  if (context.gpu.matmul_efficiency > 0 && context.compute_dtype != graph::DType::kF32) {
    context.time_options.matmul_efficiency = context.gpu.matmul_efficiency;
  }
  // FlashAttention runs 16-bit only; fp32 attention takes SDPA's math path (GEMMs).
  if (context.compute_dtype != graph::DType::kF32) {
    context.time_options.attention_forward_efficiency = context.gpu.attention_forward_efficiency;
    context.time_options.attention_backward_efficiency = context.gpu.attention_backward_efficiency;
  }
  if (!settings.calibration_file.empty()) {
    Result<Calibration> calibration = load_calibration(settings.calibration_file);
    if (!calibration.is_ok()) return calibration.status();
    context.time_options = calibrated(context.time_options, calibration.value());
    if (calibration->cuda_context_bytes && !settings.cuda_context_bytes) {
      context.measured_context_bytes = calibration->cuda_context_bytes;
    }
  }
  return Status::ok();
}

}  // namespace

// BatchNorm in training mode normalizes each channel over the batch and the map:
// torch refuses one value per channel ("Expected more than 1 value per channel
// when training", torch/nn/functional.py _verify_batch_size), which a micro-batch
// of 1 reaches at a 1x1 map (ResNet's last stage at 32 px). Refused before the
// run, never found at its first step (issue 37).
Status check_batch_norm_values(const ModelContext& context, int64_t micro_batch) {
  for (const graph::Node& node : context.graph.nodes) {
    if (!node.op.starts_with("batch_norm") || node.inputs.empty() || node.params.empty()) continue;
    const graph::Tensor* input = context.graph.find_tensor(node.inputs.front());
    const int64_t channels = node.params.front().elements();
    if (input == nullptr || channels <= 0) continue;
    const std::optional<int64_t> elements = input->elements.eval(micro_batch, context.seq_len);
    if (!elements || *elements / channels > 1) continue;
    return Status::invalid_input("micro_batch: " + std::to_string(micro_batch) + " sample(s) reach " + node.name +
                                 " (BatchNorm) with one value per channel, which torch refuses to train (\"Expected "
                                 "more than 1 value per channel when training\"); expected a larger micro-batch or "
                                 "resolution");
  }
  return Status::ok();
}

Result<ModelContext> prepare_context(const RunSettings& settings) {
  const Status valid = validate_settings(settings, "settings");
  if (!valid.is_ok()) return valid;
  ModelContext context;
  // The stack's mechanisms, resolved once for the model's build and its rewrites.
  const ResolvedStack stack = resolve_stack(settings);
  Result<graph::LayerGraph> loaded = load_model_graph(settings, stack, context);
  if (!loaded.is_ok()) return loaded.status();
  if (Status status = apply_mechanisms(loaded.value(), settings, stack, context); !status.is_ok()) return status;
  if (Status status = resolve_gpu(settings, context); !status.is_ok()) return status;
  if (Status status = resolve_sequence(settings, context); !status.is_ok()) return status;
  if (Status status = resolve_time_options(settings, context); !status.is_ok()) return status;
  if (allocator_budget(context, settings) <= 0) {
    return Status::invalid_input("gpu_mem: " + std::to_string(context.gpu.memory_bytes >> 20) +
                                 " MiB leaves nothing after the CUDA context (" +
                                 std::to_string(context_bytes(context, settings) >> 20) +
                                 " MiB) and the " +
                                 std::to_string(static_cast<int>(settings.safety_margin * 100)) +
                                 "% safety margin (expected more GPU memory)");
  }
  return context;
}

namespace {

// Marks `choice` on every checkpointable block `patterns` name (`field`: the
// setting's name, for the message); a block already given another choice, or
// one that cannot take this one, is refused.
Status mark_blocks(const ModelContext& context, const std::vector<std::string>& patterns, std::string_view field,
                   BlockChoice choice, std::vector<BlockChoice>& choices) {
  const auto& blocks = context.graph.blocks;
  const std::string name(field);
  for (const std::string& pattern : patterns) {
    bool matched = false;
    for (size_t b = 0; b < blocks.size(); ++b) {
      if (!name_matches(pattern, blocks[b].name)) continue;
      matched = true;
      if (!blocks[b].checkpointable) {
        return Status::invalid_input(name + ": block \"" + blocks[b].name + "\" of " + context.graph.name +
                                     (choice == BlockChoice::kCheckpoint ? " cannot be checkpointed"
                                                                         : " cannot offload its activations") +
                                     " (embedding or head)");
      }
      if (choices[b] != BlockChoice::kKeep && choices[b] != choice) {
        return Status::invalid_input(name + ": block \"" + blocks[b].name +
                                     "\" is also checkpointed; expected each block checkpointed or offloaded, "
                                     "not both");
      }
      choices[b] = choice;
    }
    if (!matched) {
      return Status::invalid_input(name + ": \"" + pattern + "\" matches no block of " + context.graph.name +
                                   " (expected a block name such as \"" +
                                   blocks[std::min<size_t>(1, blocks.size() - 1)].name + "\" or a glob)");
    }
  }
  return Status::ok();
}

}  // namespace

Result<std::vector<BlockChoice>> user_block_choices(const ModelContext& context,
                                                    const RunSettings& settings) {
  const auto& blocks = context.graph.blocks;
  std::vector<BlockChoice> choices(blocks.size(), BlockChoice::kKeep);
  if (settings.checkpointing == CheckpointPolicy::kEveryBlock) {
    for (size_t b = 0; b < blocks.size(); ++b) {
      if (blocks[b].checkpointable) choices[b] = BlockChoice::kCheckpoint;
    }
  } else if (settings.checkpointing == CheckpointPolicy::kList) {
    Status marked = mark_blocks(context, settings.checkpoint_blocks, "checkpoint_blocks", BlockChoice::kCheckpoint,
                                choices);
    if (!marked.is_ok()) return marked;
  }
  Status offloaded = mark_blocks(context, settings.offload_blocks, "offload_blocks", BlockChoice::kOffload, choices);
  if (!offloaded.is_ok()) return offloaded;
  return choices;
}

GlobalConfig user_config(const RunSettings& settings) {
  GlobalConfig config;
  config.zero_stage = settings.zero_stage;
  config.offload_optimizer = settings.offload_optimizer;
  config.offload_param = settings.offload_param;
  config.micro_batch = settings.micro_batch;
  const int64_t per_rank = settings.effective_global_batch() / settings.world_size();
  config.grad_accum = std::max<int64_t>(1, per_rank / settings.micro_batch);
  return config;
}

// What the user should know about the answer's inputs: budgets that were
// assumed rather than given, and a checkpoint that disagrees with its config.
std::vector<std::string> input_warnings(const ModelContext& context, const RunSettings& settings) {
  std::vector<std::string> out;
  if (!settings.host_ram_bytes) {
    out.push_back("host RAM budget assumed to be 128 GiB per node (give --host-ram)");
  }
  if (!settings.disk_free_bytes) {
    out.push_back("free disk assumed to be 500 GB (give --disk)");
  }
  if (settings.calibration_file.empty()) {
    // The rates the time model uses: the GPU's published matmul figure where the
    // catalogue has one (prepare_context), else the defaults.
    const auto percent = [](double fraction) { return std::to_string(static_cast<int>(fraction * 100 + 0.5)) + "%"; };
    out.push_back("times use uncalibrated efficiencies (" + percent(context.time_options.matmul_efficiency) +
                  " of peak matmul rate, " + percent(context.time_options.bandwidth_efficiency) +
                  " of memory bandwidth; --calibration FILE replaces them)");
  }
  for (const std::string& mismatch : context.checkpoint_mismatches) {
    out.push_back("checkpoint vs config.json: " + mismatch);
  }
  if (settings.shortest_sample && *settings.shortest_sample < context.seq_len) {
    out.push_back("batches of varied length: time and the timeline are for batches at the sequence length (the "
                  "slowest); the band's top is the cache the replayed batches of drawn lengths grew" +
                  std::string(uses_expandable_segments(settings)
                                  ? ""
                                  : ", which PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True mostly avoids "
                                    "(--expandable-segments on)"));
  }
  if (settings.compile) {
    out.push_back("torch.compile: compiled layers save what the min-cut partitioner keeps and run each connected "
                  "run of pointwise ops as one kernel; the embedding, head and loss are priced as eager "
                  "(docs/stacks.md)");
  }
  return out;
}

}  // namespace headroom::planner
