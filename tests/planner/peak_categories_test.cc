// The categories of the walk's peak: what autograd holds for backward is
// activations, what is in flight is transient, and the bytes do not depend on
// the labels (docs/memory-model.md, "Categories at the peak").
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "planner/predict/step_model.h"
#include "predict_as_given.h"

namespace headroom::planner {
namespace {

// A Trainer run of config.json folder `model` (tests/data/hf) on an H200 at 1 x 512,
// transformers 5.23.0: the grid's hf-trainer rows, given as compare.py gives them.
RunSettings trainer_run(const std::string& model, Precision precision, TrainMode mode) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/" + model + "/config.json";
  s.gpu = "h200";
  s.stack = Stack::kHfTrainer;
  s.precision = precision;
  s.mode = mode;
  if (mode != TrainMode::kFull) s.lora.targets = {"q_proj", "v_proj"};
  s.micro_batch = 1;
  s.seq_len = 512;
  s.versions["transformers"] = "5.23.0";
  return s;
}

// Block 0 keeps 100 bytes; block 1 keeps 50, of which 20 are released by the
// node where its backward peaks, with 30 bytes of gradients in flight there.
StepModel two_blocks() {
  StepModel model;
  model.base = 1000;
  model.grads_bwd = {0, 0};
  BlockProfile first;
  first.keep = 100;
  first.checkpoint = 10;
  first.fwd_peak = 110;
  first.fwd_peak_saved = 100;
  first.fwd_peak_nograd = 20;
  first.bwd_peak = 120;
  first.bwd_peak_saved = 100;
  first.recompute_peak = 110;
  first.recompute_peak_saved = 100;
  first.reentrant_recompute_peak = 110;  // no cached input casts
  first.reentrant_recompute_peak_saved = 100;
  first.on_autograd = true;
  BlockProfile second = first;
  second.keep = 50;
  second.checkpoint = 5;
  second.fwd_peak = 60;
  second.fwd_peak_saved = 50;
  second.bwd_peak = 50 + 30;
  second.bwd_peak_saved = 30;
  second.recompute_peak = 60;
  second.recompute_peak_saved = 50;
  second.reentrant_recompute_peak = 60;
  second.reentrant_recompute_peak_saved = 50;
  model.blocks = {first, second};
  model.copy_ms = {0, 0};
  return model;
}

TEST_CASE("the block in flight's saved tensors still held are activations at its backward peak") {
  const StepModel model = two_blocks();
  const StepPeak peak = walk_step(model, {BlockChoice::kKeep, BlockChoice::kKeep}, 7);
  REQUIRE(peak.phase == "backward");
  REQUIRE(peak.block == 1);
  CHECK(peak.bytes == 1000 + 100 + 80);
  CHECK(peak.activations == 100 + 7 + 30);  // block 0's saves, persistent, block 1's still held
  CHECK(peak.transient == 80 - 30);
}

TEST_CASE("a checkpointed block's inputs are activations, its recompute only when reentrant") {
  StepModel model = two_blocks();
  const std::vector<BlockChoice> choices = {BlockChoice::kKeep, BlockChoice::kCheckpoint};
  const StepPeak non_reentrant = walk_step(model, choices, 0);
  model.reentrant_recompute = true;
  const StepPeak reentrant = walk_step(model, choices, 0);
  REQUIRE(non_reentrant.block == 1);
  REQUIRE(non_reentrant.phase == "backward");
  CHECK(reentrant.bytes == non_reentrant.bytes);  // labels only, without cached input casts
  CHECK(non_reentrant.activations == 100 + 5);
  CHECK(reentrant.activations == 100 + 30);
  CHECK(reentrant.activations + reentrant.transient == non_reentrant.activations + non_reentrant.transient);
}

TEST_CASE("autocast's cached casts of checkpointed blocks are transient, not activations") {
  StepModel model = two_blocks();
  model.blocks[0].cast_cache = 400;  // large enough to put the peak in block 1's forward
  const StepPeak peak = walk_step(model, {BlockChoice::kCheckpoint, BlockChoice::kKeep}, 0);
  REQUIRE(peak.phase == "forward");
  REQUIRE(peak.block == 1);
  CHECK(peak.bytes == 1000 + 10 + 400 + 60);
  CHECK(peak.activations == 10 + 50);  // block 0's input, block 1's saves so far
  CHECK(peak.transient == 400 + 10);
}

// The oracle's Trainer run hf-trainer/qwen2.5-0.5b/lora/bf16/none/b1s512
// (docs/results/oracle.md): at the peak, in the head's backward, the fp32
// log-softmax the loss saved is still held (311 MB), beside the loss's two
// gradients of the same size in flight. Oracle: activations 877,150,788 B,
// transient 622,330,124 B; before this split headroom said 564 MB / 939 MB.
TEST_CASE("Qwen2.5-0.5B LoRA at the head's backward: the saved log-softmax is an activation") {
  RunSettings s = trainer_run("qwen2.5-0.5b", Precision::kBf16Pure, TrainMode::kLora);
  s.optimizer_impl = OptimizerImpl::kFused;
  const Prediction prediction = predict_as_given(s);
  CHECK(prediction.peak.activations == doctest::Approx(877150788.0).epsilon(0.03));
  CHECK(prediction.peak.transient == doctest::Approx(622330124.0).epsilon(0.03));
}

TEST_CASE("a tied weight's gradient waiting for its last use's backward is transient, not a gradient") {
  // Qwen2.5-0.5B trained in full under AMP, peaking at the embedding's backward: the
  // tied lm_head's fp32 gradient is still in autograd's input buffer (the embedding's
  // is added into it in place; AccumulateGrad runs after), so not yet a `.grad`.
  RunSettings s = trainer_run("qwen2.5-0.5b", Precision::kBf16Amp, TrainMode::kFull);
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.optimizer_impl = OptimizerImpl::kFused;
  const Prediction p = predict_as_given(s);
  REQUIRE(p.where.phase == "backward");
  REQUIRE(p.where.block == 0);
  const int64_t tied = int64_t{151936} * 896 * 4;
  // every gradient but the tied one's: all are fp32 as the fp32 parameters, all trained
  CHECK(p.peak.gradients + tied == doctest::Approx(static_cast<double>(p.peak.parameters)).epsilon(0.002));
  // the buffer and the embedding's own gradient beside it
  CHECK(p.peak.transient >= 2 * tied);
}

TEST_CASE("the allocated breakdown splits peak_allocated tensor by tensor, as the oracle counts") {
  // Qwen2.5-0.5B's fp32 parameters under AMP: every tensor's bytes are a multiple of
  // 512 (896 x 4 = 7 x 512), so torch.cuda.memory_allocated counts exactly 4 bytes a
  // parameter; the reserved accounting gives each tensor of 10 MiB and more its own
  // segment rounded to 2 MiB (c10/cuda/CUDACachingAllocator.cpp): the 72 MLP weights
  // (17,432,576 B, +1,441,792 each) and the tied embedding (544,538,624 B, +720,896).
  RunSettings s = trainer_run("qwen2.5-0.5b", Precision::kBf16Amp, TrainMode::kFull);
  s.optimizer_impl = OptimizerImpl::kFused;
  const Prediction p = predict_as_given(s);
  const MemoryBreakdown& a = p.peak_as_allocated;
  CHECK(a.parameters == 4 * p.model.total_params);
  CHECK(p.peak.parameters - a.parameters == 72 * int64_t{1441792} + 720896);
  CHECK(a.optimizer_states == 2 * a.parameters);  // AdamW's exp_avg and exp_avg_sq, fp32
  // no CUDA context and no pool slack: the categories add up to the allocated peak
  CHECK(a.cuda_context == 0);
  CHECK(a.allocator == 0);
  CHECK(a.total() == p.peak_allocated);
}

TEST_CASE("a module's buffers are counted apart among the parameters") {
  // transformers 4.44.2's Qwen2 keeps cos/sin caches per attention layer as buffers,
  // [max_position_embeddings, head_dim] in the model's dtype (models/qwen2/modeling_qwen2.py
  // Qwen2RotaryEmbedding._set_cos_sin_cache); 4.45 dropped them (docs/models.md,
  // "Rotary caches"). The oracle leaves buffers with its transients, headroom with
  // the parameters: `buffers` lets the comparison put them beside the oracle's.
  RunSettings s = trainer_run("qwen2.5-0.5b", Precision::kBf16Pure, TrainMode::kLora);
  s.versions["transformers"] = "4.44.2";
  const int64_t caches = int64_t{24} * 2 * 32768 * 64 * 2;  // 4 MiB each: no rounding either way
  const Prediction before = predict_as_given(s);
  CHECK(before.peak.buffers == caches);
  CHECK(before.peak_as_allocated.buffers == caches);
  s.versions["transformers"] = "5.23.0";
  const Prediction after = predict_as_given(s);
  CHECK(after.peak.buffers == 0);
  CHECK(before.peak.parameters - after.peak.parameters == caches);
}

TEST_CASE("bitsandbytes' quantization state and torchtune's kept RoPE caches are counted apart") {
  // Mistral-7B's NF4 base under the Trainer: the QuantState beside each packed weight
  // (an 8-bit absmax per 64 weights with double quantization, bitsandbytes/functional.py
  // quantize_4bit) is no nn.Parameter: about one byte per 64 quantized weights.
  RunSettings s = trainer_run("mistral-7b", Precision::kBf16Pure, TrainMode::kQlora);
  const Prediction qlora = predict_as_given(s);
  const double quantized = 2.0 * static_cast<double>(qlora.model.weight_bytes_by_dtype.at("nf4"));
  CHECK(static_cast<double>(qlora.peak.buffers) == doctest::Approx(quantized / 64).epsilon(0.02));
  CHECK(qlora.peak.saved_buffers == 0);
  // torchtune 0.6.1's Llama-style cache is multiplied as a view of itself (kept), Qwen2's
  // is cast to a copy first (not kept): 384 MiB of Qwen2.5-0.5B's buffers, none kept.
  RunSettings tt = torchtune_llama_1b();
  tt.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3-8b/config.json";
  tt.mode = TrainMode::kLora;
  tt.versions["torchtune"] = "0.6.1";
  const Prediction llama = predict_as_given(tt);
  CHECK(llama.peak.buffers == int64_t{32} * 8192 * 64 * 2 * 4);  // [8192, 64, 2] fp32 a layer
  CHECK(llama.peak.saved_buffers == llama.peak.buffers);
  tt.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/qwen2.5-0.5b/config.json";
  const Prediction qwen = predict_as_given(tt);
  CHECK(qwen.peak.buffers == int64_t{24} * 32768 * 128 * 4);
  CHECK(qwen.peak.saved_buffers == 0);
}

TEST_CASE("a checkpointed layer does not keep torchtune's RoPE cache for backward") {
  // Llama 3 8B LoRA under torchtune 0.6.1: a 4 MiB fp32 cache in each of 32 layers
  // (lora_llama3_self_attention). Unless checkpointed, each layer's rotary mul saves a
  // view of it; checkpointed, the cache is a buffer only (the oracle, env tt: 386.5 MiB
  // of activations at the head's forward, not 514.8).
  RunSettings tt = torchtune_llama_1b();
  tt.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3-8b/config.json";
  tt.mode = TrainMode::kLora;
  tt.versions["torchtune"] = "0.6.1";
  tt.checkpointing = CheckpointPolicy::kEveryBlock;
  const Prediction lora = predict_as_given(tt);
  CHECK(lora.peak.buffers == int64_t{32} * 8192 * 64 * 2 * 4);
  CHECK(lora.peak.saved_buffers == 0);
  // The full builder's one shared cache, [131072, 32, 2] fp32 for Llama 3.2 1B: kept by
  // the layers' saves without checkpointing, a buffer only with it.
  RunSettings full = torchtune_llama_1b();
  full.mode = TrainMode::kFull;
  full.versions["torchtune"] = "0.6.1";
  const Prediction kept = predict_as_given(full);
  CHECK(kept.peak.buffers == int64_t{131072} * 32 * 2 * 4);
  CHECK(kept.peak.saved_buffers == kept.peak.buffers);
  full.checkpointing = CheckpointPolicy::kEveryBlock;
  const Prediction checkpointed = predict_as_given(full);
  CHECK(checkpointed.peak.buffers == kept.peak.buffers);
  REQUIRE(checkpointed.where.block_name.find("layers.") == std::string::npos);  // in no layer's recompute
  CHECK(checkpointed.peak.saved_buffers == 0);
}

}  // namespace
}  // namespace headroom::planner
