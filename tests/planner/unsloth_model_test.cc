// --stack unsloth as Unsloth 2026.8.19 (unsloth_zoo 2026.8.13) patches a Llama
// (docs/stacks.md, "Unsloth"): bytes read from each autograd Function's
// save_for_backward, on Llama 3.2 1B cut to two layers (tests/data/hf/llama-3.2-1b-2layers:
// hidden 2048, intermediate 8192, 32 heads and 8 KV heads of 64, vocab 128256).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "planner/mechanisms/unsloth_model.h"
#include "planner/predict/simulator.h"
#include "planner/predict/step_model.h"
#include "planner/settings/bnb_release.h"
#include "planner/settings/validate_settings.h"
#include "planner/settings/stack.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

constexpr int64_t kBatch = 2;
constexpr int64_t kSeq = 2048;
constexpr int64_t kHidden = 2048;
constexpr int64_t kIntermediate = 8192;
constexpr int64_t kVocab = 128256;

RunSettings unsloth_llama(TrainMode mode = TrainMode::kQlora) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b-2layers/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.mode = mode;
  s.micro_batch = kBatch;
  s.seq_len = kSeq;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.stack = Stack::kUnsloth;
  s.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  s.lora.dropout = 0;
  return s;
}

const graph::Node& node(const ModelContext& context, const std::string& name) {
  const auto found = std::find_if(context.graph.nodes.begin(), context.graph.nodes.end(),
                                  [&](const graph::Node& n) { return n.name == name; });
  REQUIRE_MESSAGE(found != context.graph.nodes.end(), name);
  return *found;
}

int64_t elements(const ModelContext& context, const std::string& tensor) {
  const graph::Tensor* found = context.graph.find_tensor(tensor);
  REQUIRE_MESSAGE(found != nullptr, tensor);
  return found->elements.at(kBatch, kSeq);
}

bool saves_any_lora_mid(const ModelContext& context) {
  return std::any_of(context.graph.nodes.begin(), context.graph.nodes.end(), [](const graph::Node& n) {
    return std::any_of(n.saves.begin(), n.saves.end(),
                       [](const graph::SavedRef& saved) { return saved.tensor.ends_with(".lora_mid"); });
  });
}

}  // namespace

TEST_CASE("Unsloth's stack: reentrant checkpointing, fp32 adapters, the Trainer's autocast, its fused loss") {
  const ResolvedStack stack = resolve_stack(unsloth_llama());
  CHECK(stack.top.recompute == Recompute::kBlockReentrant);
  CHECK(stack.top.adapter_dtype == AdapterDtype::kFp32);
  CHECK(stack.top.autocast);
  CHECK(stack.top.input_require_grads);
  RunSettings unchecked = unsloth_llama();
  unchecked.checkpointing = CheckpointPolicy::kNone;  // enable_input_require_grads all the same
  CHECK(resolve_stack(unchecked).top.input_require_grads);
  CHECK(stack.top.kbit_prep == KbitPrep::kNone);
  CHECK(stack.top.loss.impl == LossImpl::kUnslothFusedCeEager);
  CHECK(stack.bottom.loss.impl == LossImpl::kUnslothFusedCe);
  CHECK(parse_stack("unsloth") == Stack::kUnsloth);
  // unsloth_zoo/__init__.py sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.
  CHECK(uses_expandable_segments(unsloth_llama()));
  // pyproject.toml requires bitsandbytes>=0.45.5: MatMul4Bit keeps no input, the band has no bnb part.
  CHECK_FALSE(bnb_regime(unsloth_llama()).keeps_input);
  std::vector<std::string> unknowns;
  add_bnb_unknowns(unsloth_llama(), unknowns);
  CHECK(unknowns.empty());
}

TEST_CASE("fast_rms_layernorm keeps x and the fp32 r per row, no fp32 copy of x") {
  const ModelContext context = prepared_context(unsloth_llama());
  const graph::Node& norm = node(context, "model.layers.0.post_attention_layernorm");
  CHECK(context.graph.find_tensor("model.layers.0.post_attention_layernorm:x32") == nullptr);
  CHECK(context.graph.find_tensor("model.layers.0.post_attention_layernorm:normalized") == nullptr);
  REQUIRE(norm.saves.size() == 2);
  CHECK(norm.saves[0].tensor == norm.inputs.front());
  CHECK(elements(context, norm.saves[1].tensor) == kBatch * kSeq);  // r: one fp32 per row
  // The final norm too (LlamaModel_fast_forward: fast_rms_layernorm(self.norm, ...)).
  CHECK(context.graph.find_tensor("model.norm:x32") == nullptr);
}

TEST_CASE("LoRA_MLP keeps X, e and g, LoRA_QKV and LoRA_W keep X: no X @ A, no silu(e), no h") {
  const ModelContext context = prepared_context(unsloth_llama());
  const std::string mlp = "model.layers.1.mlp";
  const graph::Node& product = node(context, mlp + ".act_mul_up");
  const graph::Node& down = node(context, mlp + ".down_proj");
  CHECK_FALSE(saves(product, node(context, mlp + ".act_fn").outputs.front()));
  CHECK(saves(product, node(context, mlp + ".up_proj").outputs.front()));  // g
  CHECK(saves(node(context, mlp + ".act_fn"), node(context, mlp + ".gate_proj").outputs.front()));  // e
  CHECK_FALSE(saves(down, product.outputs.front()));  // h, recomputed from e and g
  CHECK_FALSE(saves_any_lora_mid(context));
  // The 4-bit bases: dequantized into the global buffer in forward; in backward a fresh
  // in x out copy for gate and up (fast_dequantize), the buffer again for down (matmul_lora).
  CHECK(node(context, mlp + ".gate_proj").workspace_elements.is_zero());
  CHECK(node(context, mlp + ".gate_proj").backward_workspace().at(kBatch, kSeq) == kHidden * kIntermediate);
  CHECK(down.backward_workspace().is_zero());
  CHECK(node(context, "model.layers.1.self_attn.o_proj").backward_workspace().at(kBatch, kSeq) == kHidden * kHidden);
  const graph::Param* buffer = find_param(context.graph, "unsloth.weight_buffer");
  REQUIRE(buffer != nullptr);
  CHECK(buffer->elements() == kHidden * kIntermediate);  // the largest base weight, bf16
  CHECK(buffer->dtype == graph::DType::kBF16);
  CHECK_FALSE(buffer->trainable);
}

TEST_CASE("with lora dropout Unsloth keeps PEFT's modules: nothing fused") {
  RunSettings s = unsloth_llama();
  s.lora.dropout = 0.05;
  const ModelContext context = prepared_context(s);
  CHECK(saves_any_lora_mid(context));
  CHECK(find_param(context.graph, "unsloth.weight_buffer") == nullptr);
}

TEST_CASE("the attention backend that keeps the most: xformers' K and V copied to every head for grouped K/V") {
  // 2 x (2048 - 512) > 2048: xformers' two expanded copies outweigh SDPA's output copy.
  const ModelContext context = prepared_context(unsloth_llama());
  const graph::Node& attention = node(context, "model.layers.0.self_attn.sdpa");
  CHECK(elements(context, "model.layers.0.self_attn.sdpa.xformers_k") == kBatch * kSeq * kHidden);
  CHECK(saves(attention, "model.layers.0.self_attn.sdpa.xformers_v"));
  CHECK_FALSE(saves(attention, attention.inputs[1]));
}

TEST_CASE("unsloth_zoo's fused CE: chunks of at most 4 GiB of fp32 logits, the gradient kept") {
  CHECK(unsloth_ce_chunks(4096, kVocab) == 1);     // 2.0 GB of fp32 logits
  CHECK(unsloth_ce_chunks(16384, kVocab) == 4);    // 8.4 GB: exact 2, rounded up to 4
  CHECK(unsloth_ce_chunks(65536, kVocab) == 8);    // 33.6 GB: exact 8
  const ModelContext context = prepared_context(unsloth_llama());
  const graph::Node& head = node(context, "lm_head");
  CHECK(head.op == "fused_linear_ce");
  const int64_t rows = kBatch * kSeq;  // one chunk
  CHECK(head.workspace_elements.at(kBatch, kSeq) == rows * kVocab * 16 / 2 + 2 * rows);  // the eager top
  CHECK(elements(context, head.outputs.front()) == rows * kHidden);  // grad_inputs
}

TEST_CASE("Unsloth's checkpointer: inputs to the host but the last, two GPU buffers, nothing over 2 MiB stays") {
  StepModel model;
  constexpr int64_t kInput = 8 << 20;
  for (int k = 0; k < 4; ++k) {
    BlockProfile block;
    block.keep = block.checkpoint = kInput;
    block.fwd_peak = block.keep;
    block.fwd_peak_nograd = block.checkpoint;
    block.bwd_peak = block.keep;
    block.on_autograd = true;
    model.blocks.push_back(block);
    model.copy_ms.push_back(1.0);
  }
  model.grads_bwd.assign(4, 0);
  const std::vector<BlockChoice> choices(4, BlockChoice::kCheckpoint);
  const StepPeak kept = walk_step(model, choices, 0);
  model.checkpoint_offload_buffers = 2;
  const StepPeak offloaded = walk_step(model, choices, 0);
  CHECK(offloaded.host_activations == 3 * kInput);  // the last block's input stays on the GPU
  // Before the last block: three inputs kept, against two buffers.
  CHECK(kept.bytes - offloaded.bytes == kInput);
  for (BlockProfile& block : model.blocks) block.checkpoint = block.keep = 2 << 20;
  CHECK(walk_step(model, choices, 0).host_activations == 0);  // MINIMUM_SIZE: 2 MiB stays
}

// `simulate` replays the same checkpointer as the step walk: the first layer's input
// leaves the GPU once its forward has read it, the last layer's stays, and two buffers
// of the input's size take it back in backward. Before, the simulator kept every input,
// so reserved memory (the verdict's) stood a layer's input per layer above the walk's
// allocated peak: 18 GiB of "slack" for Llama 3.1 8B at 78k tokens.
TEST_CASE("simulate offloads Unsloth's checkpoint inputs as the step walk does") {
  const RunSettings settings = unsloth_llama();
  const ModelContext context = prepared_context(settings);
  const Result<std::vector<BlockChoice>> choices = user_block_choices(context, settings);
  REQUIRE(choices.is_ok());
  const GlobalConfig config = user_config(settings);
  const Simulation simulated = simulate(context, settings, config, choices.value());
  const Prediction walked = predict(context, settings, config, choices.value());
  constexpr int64_t kInput = kBatch * kSeq * kHidden * 2;  // one bf16 layer input
  int64_t buffers = 0;
  for (const LiveItem& item : simulated.live_at_peak) {
    if (item.name == "checkpoint input buffers") buffers = item.bytes;
  }
  CHECK(buffers == 2 * kInput);
  // The walk and the replay agree within a layer input's hundredth.
  CHECK(std::abs(simulated.peak_allocated - walked.peak_allocated) < kInput / 100);
}

TEST_CASE("Unsloth's refusals name the missing piece") {
  RunSettings full = unsloth_llama(TrainMode::kFull);
  CHECK(validate_settings(full, "f").message().find("Unsloth's full fine-tuning") != std::string::npos);
  RunSettings zero = unsloth_llama();
  zero.zero_stage = 2;
  CHECK(validate_settings(zero, "f").message().find("f: gpus: Unsloth with more than one GPU") != std::string::npos);
  RunSettings eager = unsloth_llama();
  eager.attention = models::AttentionImpl::kEager;
  CHECK(validate_settings(eager, "f").message().find("attention") != std::string::npos);
  RunSettings gemma = unsloth_llama();
  gemma.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/gemma-2b/config.json";
  const Result<ModelContext> refused = prepare_context(gemma);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.message().find("no Unsloth fast path") != std::string::npos);
  CHECK(validate_settings(unsloth_llama(), "f").is_ok());
}

}  // namespace headroom::planner
