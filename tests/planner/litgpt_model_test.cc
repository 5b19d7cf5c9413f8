// --stack litgpt as litgpt 0.5.13 and Lightning 2.6.6 run finetune/full.py and lora.py
// (docs/stacks.md, "litgpt"): bytes computed from the libraries' code, on Llama 3.2 1B
// (tests/data/hf/llama-3.2-1b: hidden 2048, 16 layers, 32 heads, 8 KV heads of 64,
// vocab 128256, tie_word_embeddings true).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "planner/mechanisms/litgpt_model.h"
#include "planner/mechanisms/loss_variants.h"
#include "planner/settings/stack.h"
#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

constexpr int64_t kHidden = 2048;
constexpr int64_t kVocab = 128256;
constexpr int64_t kKvWidth = 8 * 64;

RunSettings litgpt_llama_1b(TrainMode mode, Precision precision = Precision::kBf16Pure) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b/config.json";
  s.gpu = "h200";
  s.precision = precision;
  s.mode = mode;
  s.micro_batch = 2;
  s.seq_len = 2048;
  s.stack = Stack::kLitgpt;
  if (mode != TrainMode::kFull) {
    s.lora.targets = {"q_proj", "v_proj"};
    s.lora.dropout = 0.05;
  }
  return s;
}

const graph::Tensor& tensor(const ModelContext& context, const std::string& name) {
  const graph::Tensor* found = context.graph.find_tensor(name);
  REQUIRE_MESSAGE(found != nullptr, name);
  return *found;
}

int64_t elements(const ModelContext& context, const std::string& name) {
  return tensor(context, name).elements.at(2, 2048);
}

}  // namespace

TEST_CASE("litgpt's lm_head is a matrix of its own even where the checkpoint ties it") {
  // GPT.__init__ makes lm_head and wte apart; convert_hf_checkpoint.py copies wte
  // into lm_head: V x H bf16 more parameters, and in a full fine-tune two more
  // AdamW states (bf16 under bf16-true).
  RunSettings litgpt = litgpt_llama_1b(TrainMode::kFull);
  RunSettings plain = litgpt;
  plain.stack = Stack::kTorchAmp;
  const Prediction untied = predict_as_given(litgpt);
  const Prediction tied = predict_as_given(plain);
  const int64_t head = kVocab * kHidden * 2;
  CHECK(untied.allocated.parameters - tied.allocated.parameters == head);
  CHECK(untied.allocated.optimizer_states - tied.allocated.optimizer_states == 2 * head);
  graph::LayerGraph graph = prepared_context(plain).graph;
  const int64_t before = graph.parameter_count();
  untie_output_head(graph);
  CHECK(graph.parameter_count() - before == kVocab * kHidden);
}

TEST_CASE("litgpt copies K and V to every head and keeps RMSNorm's normalized tensor in fp32") {
  const RunSettings s = litgpt_llama_1b(TrainMode::kFull);
  // CausalSelfAttention.forward: k.repeat_interleave(q_per_kv, dim=1).
  const ResolvedStack stack = resolve_stack(s);
  CHECK(stack.top.repeat_kv);
  CHECK(stack.bottom.repeat_kv);
  // RMSNorm.forward: (x_normed * weight.float()).to(dtype), x_normed = x.float() * rsqrt(...).
  const ModelContext context = prepared_context(s);
  CHECK(tensor(context, "model.layers.0.input_layernorm:normalized").dtype == graph::DType::kF32);
}

TEST_CASE("full.py: Fabric's fp32 logits are held all step, and backward holds 12 bytes a logit") {
  const RunSettings s = litgpt_llama_1b(TrainMode::kFull);
  CHECK(resolve_stack(s).top.loss == LossSpec{LossImpl::kLitgptFull, 8});
  const ModelContext context = prepared_context(s);
  const int64_t tokens = 2 * 2048;
  const int64_t logits = tokens * kVocab;
  // convert_output's fp32 copy, bound to `logits` until the next forward's: whole-step.
  const graph::Tensor& held = tensor(context, "loss:held_logits");
  CHECK(held.dtype == graph::DType::kF32);
  CHECK(held.elements.at(2, 2048) == logits);
  const StepProfile profile = profile_step(context.graph, context.analysis, context.compute_dtype, 2, 2048,
                                           Accounting::kAllocated, context.gpu);
  const BlockProfile& head = profile.blocks.back();
  // The head's own saves besides the log-probabilities: ln_f's fp32 x and fp32 x_normed
  // (its weight trains), its rstd, and lm_head's bf16 input for the weight gradient.
  const int64_t norm_and_input = tokens * kHidden * (4 + 4 + 2) + tokens * 4;
  // At the loss's backward, before lm_head's weight gradient: the held logits, cat of
  // the chunks' fp32 gradients and slice_backward's fp32 (B, S, V): 3 x 4 bytes a logit.
  REQUIRE(head.bwd_peak_before_param_grads >= 0);
  const int64_t held_bytes = 4 * logits;
  CHECK(held_bytes + head.bwd_peak_before_param_grads - norm_and_input == 12 * logits);
  // none of those 12 is saved there: the head's saves are its norm's and lm_head's input
  CHECK(head.bwd_saved_before_param_grads == norm_and_input);
  // At the cast: the previous logits held, the 16-bit logits and the new fp32 ones
  // (beside the scalar loss: one 512-byte block of the allocator). The last layer's
  // output died once ln_f read it, and GPT.forward has returned: fit computes the loss,
  // so no frame binds the head's input (tests/planner/head_frame_test.cc).
  CHECK(held_bytes + head.fwd_peak - norm_and_input - 512 == 10 * logits);
  CHECK(head.fwd_peak_saved == norm_and_input);  // the fp32 copies are in flight there
}

TEST_CASE("litgpt's held fp32 logits are transient at the peak, not activations") {
  // fit binds them to `logits` through the optimizer step; autograd saves none of them
  RunSettings s = litgpt_llama_1b(TrainMode::kFull);
  s.micro_batch = 1;
  s.seq_len = 512;
  const ModelContext context = prepared_context(s);
  const graph::Tensor& held = tensor(context, "loss:held_logits");
  CHECK(held_by_caller(held));
  CHECK_FALSE(held_by_caller(tensor(context, "loss:log_probs")));
  // The full fine-tune peaks at the optimizer step: nothing autograd saves is left
  // there, so the activations are the batch's few bytes and the held logits transient.
  const Prediction p = predict_as_given(s);
  REQUIRE(p.where.phase == "optimizer step");
  const int64_t held_bytes = 4 * 512 * kVocab;
  CHECK(p.peak.activations < (1 << 20));
  CHECK(p.peak.transient >= held_bytes);
}

TEST_CASE("lora.py runs the head in 128-token chunks, and under bf16-mixed each chunk casts the frozen head again") {
  const RunSettings lora = litgpt_llama_1b(TrainMode::kLora, Precision::kBf16Amp);
  CHECK(resolve_stack(lora).top.loss == LossSpec{LossImpl::kLitgptLora, 8});
  // cached_cast caches only leaves that require grad: 2048 / 128 = 16 bf16 copies of V x H.
  const ModelContext context = prepared_context(lora);
  CHECK(elements(context, "lm_head.weight_cast") == 16 * kVocab * kHidden);
  CHECK(tensor(context, "lm_head.weight_cast").elements.at(1, 512) == 4 * kVocab * kHidden);
  // The loss's backward workspace is the fp32 log-probabilities' bytes, not saved
  // (their chunks' gradients come one at a time): 4 bytes a logit, two bf16 elements.
  const graph::Node* loss = context.graph.find_node("loss");
  REQUIRE(loss != nullptr);
  CHECK(loss->backward_workspace().at(2, 2048) == 2 * (2 * 2048 * kVocab));
  CHECK(std::none_of(loss->saves.begin(), loss->saves.end(),
                     [](const graph::SavedRef& save) { return save.tensor == "loss:log_probs"; }));
  // full.py's head trains: autocast casts it once and caches the copy.
  const ModelContext full = prepared_context(litgpt_llama_1b(TrainMode::kFull, Precision::kBf16Amp));
  CHECK(elements(full, "lm_head.weight_cast") == kVocab * kHidden);
}

TEST_CASE("lora.py's LoRAQKVLinear: one dropout for q and v, and zero_pad's input kept") {
  const ModelContext context = prepared_context(litgpt_llama_1b(TrainMode::kLora));
  const std::string attention = "model.layers.0.self_attn";
  // self.lora_dropout(x) once: q's dropout output and mask stay, v's go.
  CHECK(elements(context, attention + ".q_proj.lora_dropout_out") == 2 * 2048 * kHidden);
  CHECK(context.graph.find_tensor(attention + ".v_proj.lora_dropout_out") == nullptr);
  CHECK(context.graph.find_tensor(attention + ".v_proj.lora_dropout_mask") == nullptr);
  // index_copy_ keeps the adapters' (B, q + v rows, T) output: 2 x (2048 + 512) x 2048.
  CHECK(elements(context, attention + ".lora_qkv_out") == 2 * (kHidden + kKvWidth) * 2048);
  // With q, k and v all adapted zero_pad returns its input: nothing more is kept.
  RunSettings all = litgpt_llama_1b(TrainMode::kLora);
  all.lora.targets = {"q_proj", "k_proj", "v_proj"};
  CHECK(prepared_context(all).graph.find_tensor(attention + ".lora_qkv_out") == nullptr);
}


namespace {

const graph::Param* param(const ModelContext& context, const std::string& node, const std::string& name) {
  const graph::Node* found = context.graph.find_node(node);
  REQUIRE_MESSAGE(found != nullptr, node);
  for (const graph::Param& p : found->params) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("lora.py --quantize bnb.nf4: a 4-bit head, fp16 dequantization, and the swapped embedding's tensors") {
  RunSettings s = litgpt_llama_1b(TrainMode::kQlora);
  s.nf4_double_quant = false;  // Lightning's "nf4": compress_statistics off
  const ModelContext context = prepared_context(s);
  // BitsandbytesPrecision replaces lm_head too: V·H/2 bytes of NF4 and one fp32
  // absmax per 64 weights (bitsandbytes functional.py quantize_4bit, blocksize 64).
  const graph::Param* head = param(context, "lm_head", "lm_head.weight");
  REQUIRE(head != nullptr);
  CHECK(head->dtype == graph::DType::kNF4);
  CHECK(graph::dtype_bytes(head->dtype, head->elements()) == kVocab * kHidden / 2);  // 131,334,144
  const graph::Param* absmax = param(context, "lm_head", "lm_head.weight.absmax");
  REQUIRE(absmax != nullptr);
  CHECK(graph::dtype_bytes(absmax->dtype, absmax->elements()) == kVocab * kHidden / 64 * 4);  // 16,416,768
  // MatMul4Bit.backward: dequantize_4bit to fp16 (quant_state.dtype, Lightning's
  // _Linear4bit.quantize casts to torch.half) and .to(bf16): two V·H copies, 2 bytes each.
  const graph::Node* head_node = context.graph.find_node("lm_head");
  CHECK(graph::dtype_bytes(graph::DType::kBF16, head_node->backward_workspace().at(2, 2048)) ==
        2 * kVocab * kHidden * 2);  // 1,050,673,152
  const graph::Node* q = context.graph.find_node("model.layers.0.self_attn.q_proj");
  CHECK(q->backward_workspace().at(2, 2048) == 2 * kHidden * kHidden);
  // finetune/lora.py builds the optimizer before the StableEmbedding swap: the old
  // V·H bf16 embedding stays, and the new weight's gradient (V·H bf16) is never zeroed.
  for (const char* name : {"model.embed_tokens.replaced_weight", "model.embed_tokens.weight_grad_kept"}) {
    const graph::Param* kept = param(context, "model.embed_tokens", name);
    REQUIRE_MESSAGE(kept != nullptr, name);
    CHECK_FALSE(kept->trainable);
    CHECK(graph::dtype_bytes(kept->dtype, kept->elements()) == kVocab * kHidden * 2);  // 525,336,576
  }
  // LoRA (no quantization) keeps lm_head bf16 and the one embedding.
  const ModelContext lora = prepared_context(litgpt_llama_1b(TrainMode::kLora));
  CHECK(param(lora, "lm_head", "lm_head.weight")->dtype != graph::DType::kNF4);
  CHECK(param(lora, "model.embed_tokens", "model.embed_tokens.replaced_weight") == nullptr);
}

TEST_CASE("lora.py --quantize bnb.nf4: the kept embedding gradient is a gradient and PagedAdamW keeps fp32 states") {
  RunSettings s = litgpt_llama_1b(TrainMode::kQlora);
  s.nf4_double_quant = false;
  s.lora.rank = 8;
  s.micro_batch = 1;
  s.seq_len = 512;
  const Prediction p = predict_as_given(s);
  // The StableEmbedding's gradient (V·H bf16, embedding_dense_backward) lives from the
  // first backward on; at the peak (step 2's head backward) it is the only gradient
  // besides the adapters', which the head's backward has not made yet. The oracle
  // (litgpt[lg]/llama-3.2-1b/qlora/b1s512/bnb.nf4): gradients 525,344,768 B.
  MESSAGE("gradients " << p.peak_as_allocated.gradients << " B, parameters " << p.peak_as_allocated.parameters);
  CHECK(p.peak_as_allocated.gradients >= kVocab * kHidden * 2);
  CHECK(p.peak_as_allocated.gradients < kVocab * kHidden * 2 + (8 << 20));
  // utils.py instantiate_bnb_optimizer: bnb.optim.PagedAdamW, optim_bits 32, so
  // state1 and state2 are fp32 for the bf16 adapters (Optimizer2State.init_state):
  // 8 B per trainable element. q (2048·8 + 8·2048) and v (2048·8 + 8·512) per layer, 16 layers.
  const int64_t adapters = 16 * ((kHidden * 8 + 8 * kHidden) + (kHidden * 8 + 8 * kKvWidth));
  CHECK(p.peak_as_allocated.optimizer_states + p.peak_as_allocated.paged_optimizer_states == 8 * adapters);
  CHECK(p.peak_as_allocated.optimizer_states == 8 * adapters);  // each under 1e5 elements: not paged
  // Plain LoRA keeps torch.optim.AdamW: states in the adapters' bf16.
  RunSettings lora = litgpt_llama_1b(TrainMode::kLora);
  lora.lora.rank = 8;
  lora.micro_batch = 1;
  lora.seq_len = 512;
  CHECK(predict_as_given(lora).peak_as_allocated.optimizer_states == 4 * adapters);
}

}  // namespace headroom::planner

namespace headroom::planner {
namespace {

// Layer 0's saved bytes (blocks: the embedding, then the layers) of `graph`, priced as `context`.
int64_t layer0_keep(const graph::LayerGraph& graph, const ModelContext& context) {
  const StepProfile profile = profile_step(graph, graph::analyze_graph(graph), context.compute_dtype, 2, 2048,
                                           Accounting::kAllocated, context.gpu);
  return profile.blocks.at(1).keep;
}

}  // namespace

TEST_CASE("litgpt's reshape copies the attention output, kept beside SDPA's own") {
  // CausalSelfAttention.forward: q = torch.cat(...) is [B, H, S, D] in memory, so the
  // flash output is too and y.transpose(1, 2).reshape(B, T, C) copies it for proj.
  const ModelContext context = prepared_context(litgpt_llama_1b(TrainMode::kFull));
  const std::string attention = "model.layers.0.self_attn";
  const graph::Node* proj = context.graph.find_node(attention + ".o_proj");
  REQUIRE(proj != nullptr);
  CHECK(proj->inputs.front() == attention + ".merge_heads");
  CHECK(elements(context, attention + ".merge_heads") == 2 * 2048 * kHidden);
  const graph::Node* sdpa = context.graph.find_node(attention + ".sdpa");
  REQUIRE(sdpa != nullptr);
  CHECK(std::any_of(sdpa->saves.begin(), sdpa->saves.end(),
                    [&](const graph::SavedRef& saved) { return saved.tensor == attention + ".sdpa"; }));
  // On the Hugging Face graph the rewrite keeps B x S x H bf16 more per layer.
  RunSettings plain = litgpt_llama_1b(TrainMode::kFull);
  plain.stack = Stack::kTorchAmp;
  const ModelContext hf = prepared_context(plain);
  graph::LayerGraph copied = hf.graph;
  copy_merged_heads(copied);
  CHECK(layer0_keep(copied, hf) - layer0_keep(hf.graph, hf) == 2 * 2048 * kHidden * 2);
}

TEST_CASE("under bf16-mixed litgpt's one qkv linear casts its input once") {
  const ModelContext context = prepared_context(litgpt_llama_1b(TrainMode::kFull, Precision::kBf16Amp));
  const std::string attention = "model.layers.0.self_attn";
  const graph::Node* q = context.graph.find_node(attention + ".q_proj");
  REQUIRE(q != nullptr);
  const std::string cast = q->inputs.front();
  CHECK(cast.starts_with(attention + ".q_proj.cast:"));
  for (const char* part : {".k_proj", ".v_proj"}) {
    const graph::Node* node = context.graph.find_node(attention + part);
    REQUIRE(node != nullptr);
    CHECK(node->inputs.front() == cast);
    CHECK(std::any_of(node->saves.begin(), node->saves.end(),
                      [&](const graph::SavedRef& saved) { return saved.tensor == cast; }));
  }
  CHECK(context.graph.find_tensor(attention + ".k_proj.cast:model.layers.0.input_layernorm") == nullptr);
  // On the Hugging Face graph the rewrite keeps two B x S x H bf16 copies fewer per layer.
  RunSettings plain = litgpt_llama_1b(TrainMode::kFull, Precision::kBf16Amp);
  plain.stack = Stack::kTorchAmp;
  const ModelContext hf = prepared_context(plain);
  graph::LayerGraph shared = hf.graph;
  share_qkv_input_cast(shared);
  CHECK(layer0_keep(hf.graph, hf) - layer0_keep(shared, hf) == 2 * (2 * 2048 * kHidden * 2));
}

}  // namespace headroom::planner
