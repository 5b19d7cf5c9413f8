// TRL's SFTTrainer from 1.15 (--versions trl=X): the fused LM head of
// trl/trainer/utils.py add_fused_lm_head over trl/kernels/chunked_logprob.py
// (TRL 1.16.0). No [B*S, V] logits: the head keeps the compact hidden copy and two
// fp32 values a token; its forward holds one [min(tokens, 4096) x 32768] tile and
// seven fp32 statistics a token; its backward fp32 gradients of the hidden states
// and, when the head trains, of its weight.
#include <doctest/doctest.h>

#include "models/gpt_stack.h"
#include "models/zoo.h"
#include "planner/mechanisms/trl_fused_head.h"
#include "planner/settings/stack.h"
#include "predict_as_given.h"

namespace headroom::planner {
namespace {

constexpr int64_t kHidden = 4096;  // Llama 3 8B
constexpr int64_t kVocab = 128256;

graph::LayerGraph llama(bool head_trains) {
  graph::LayerGraph g = models::build_zoo_model("llama-3-8b", models::ZooOptions{}).value();
  for (graph::Node& node : g.nodes) {
    if (node.linear && node.linear->out_features == kVocab) {
      for (graph::Param& param : node.params) param.trainable = head_trains;
    }
  }
  return g;
}

const graph::Node& fused_head(const graph::LayerGraph& g) {
  for (const graph::Node& node : g.nodes) {
    if (node.op == "trl_fused_logprob") return node;
  }
  FAIL("no fused head");
  return g.nodes.front();
}

}  // namespace

TEST_CASE("TRL fused head: no logits, the compact hidden copy and log_z, entropy kept") {
  graph::LayerGraph g = llama(false);
  REQUIRE(apply_trl_fused_head(g, 2, 1024, graph::DType::kBF16));
  const int64_t tokens = 2 * 1024;
  for (const graph::Tensor& tensor : g.tensors) CHECK(tensor.elements.at(2, 1024) < tokens * kVocab);
  const graph::Node& head = fused_head(g);
  CHECK_FALSE(head.linear.has_value());
  REQUIRE(head.outputs.size() == 1);
  const graph::Tensor* kept = g.find_tensor(head.outputs.front());
  REQUIRE(kept != nullptr);
  // bf16: H elements of the copy and 8 bytes (4 elements) of log_z and entropy a token
  CHECK(kept->elements.at(2, 1024) == tokens * (kHidden + 4));
  CHECK(head.saves.size() == 1);
  CHECK(saves(head, kept->name));
  // Below 4096 tokens the tile has a row a token: 2048 x 32768, and 52 bytes a token
  CHECK(head.workspace_elements.at(2, 1024) == tokens * kTrlVocabTile + tokens * 26);
  // Backward: fp32 grad_hidden (two bf16 elements a value) and the tile, no weight gradient
  CHECK(head.backward_workspace().at(2, 1024) == tokens * kTrlVocabTile + tokens * 2 * kHidden);
  for (const graph::Node& node : g.nodes) {
    if (node.op == "loss") CHECK(node.saves.empty());
    CHECK(node.op != "to_f32");
  }
}

TEST_CASE("TRL fused head: the tile stops at 4096 tokens, a trained head adds fp32 grad_weight") {
  graph::LayerGraph g = llama(true);
  REQUIRE(apply_trl_fused_head(g, 4, 2048, graph::DType::kBF16));
  const graph::Node& head = fused_head(g);
  const int64_t tokens = 4 * 2048;
  CHECK(trl_tile_rows(tokens) == 4096);
  CHECK(trl_tile_rows(511) == 511);
  CHECK(head.workspace_elements.at(4, 2048) == 4096 * kTrlVocabTile + tokens * 26);
  CHECK(head.backward_workspace().at(4, 2048) ==
        4096 * kTrlVocabTile + tokens * 2 * kHidden + 2 * kVocab * kHidden);
}

TEST_CASE("TRL fused head: the tile is 32768 columns even when the vocabulary is smaller") {
  // mm_buf = torch.empty((min(N, TOKEN_CHUNK_SIZE), chunk_size)): each tile is a view of it
  graph::LayerGraph g = models::build_gpt_layer_stack(2, 256, 4, 8192, models::AttentionImpl::kSdpa, 0.0);
  REQUIRE(apply_trl_fused_head(g, 2, 256, graph::DType::kBF16));
  const int64_t tokens = 2 * 256;
  CHECK(fused_head(g).workspace_elements.at(2, 256) == tokens * kTrlVocabTile + tokens * 26);
}

TEST_CASE("TRL's release picks the fused head under the Trainer's stack, from 1.15") {
  RunSettings s = llama_lora(Stack::kHfTrainer);
  s.versions = {{"transformers", "5.23.0"}, {"trl", "1.16.0"}};
  CHECK(resolve_stack(s).top.loss.impl == LossImpl::kTrlFusedHead);
  s.versions["trl"] = "1.15.0";
  CHECK(resolve_stack(s).top.loss.impl == LossImpl::kTrlFusedHead);
  s.versions["trl"] = "1.14.2";  // loss_type chunked_nll: not priced apart from the Trainer's
  CHECK(resolve_stack(s).top.loss.impl == LossImpl::kFull);
  s.versions.erase("trl");
  CHECK(resolve_stack(s).top.loss.impl == LossImpl::kFull);
}

TEST_CASE("TRL from 0.26 makes QLoRA's adapters bf16, PEFT's fp32 otherwise") {
  RunSettings s = llama_lora(Stack::kHfTrainer);
  s.mode = TrainMode::kQlora;
  s.precision = Precision::kBf16Pure;
  s.versions = {{"peft", "0.21.2"}, {"trl", "0.26.0"}};
  CHECK(resolve_stack(s).top.adapter_dtype == AdapterDtype::kModel);
  s.versions["trl"] = "0.25.1";
  CHECK(resolve_stack(s).top.adapter_dtype == AdapterDtype::kFp32);
  s.versions["trl"] = "1.16.0";
  s.mode = TrainMode::kLora;  // a 16-bit base: PEFT's fp32 adapters stay
  CHECK(resolve_stack(s).top.adapter_dtype == AdapterDtype::kFp32);
}

TEST_CASE("TRL fused head at a 128k vocabulary: below the Trainer's full loss by the logits") {
  RunSettings trainer = llama_lora(Stack::kHfTrainer);
  trainer.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}};
  RunSettings trl = trainer;
  trl.versions["trl"] = "1.16.0";
  const Prediction full = predict_as_given(trainer);
  const Prediction fused = predict_as_given(trl);
  MESSAGE("peak allocated: Trainer " << full.peak_allocated / double(1 << 30) << " GiB, TRL "
                                     << fused.peak_allocated / double(1 << 30) << " GiB");
  // The Trainer holds fp32 log-probabilities (4 bytes a logit) to backward; TRL none.
  CHECK(static_cast<double>(full.peak_allocated - fused.peak_allocated) >= 4.0 * 2 * 4096 * kVocab);
}

TEST_CASE("TRL fused head: a tied embedding's partial gradient adds in place, one transient") {
  // Llama 3.2 1B (tied, 128256 x 2048) in full at 1 x 512: the peak is the input
  // embedding's backward, where its partial joins the head's fresh bf16 gradient
  // (grad_weight.to(dtype)) in autograd's buffer in place; a linear's transposed view
  // would be summed out of place, a second V x H beside them (time/backward_gradients.cc).
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b/config.json";
  s.gpu = "h200";
  s.stack = Stack::kHfTrainer;
  s.precision = Precision::kBf16Pure;
  s.mode = TrainMode::kFull;
  s.micro_batch = 1;
  s.seq_len = 512;
  s.optimizer_impl = OptimizerImpl::kFused;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"trl", "1.16.0"}};
  const Prediction p = predict_as_given(s);
  const int64_t partial = int64_t{128256} * 2048 * 2;
  MESSAGE("transient at the peak " << p.peak.transient / double(1 << 20) << " MiB");
  // Both in flight, not yet a `.grad` (docs/memory-model.md, "Categories at the peak"):
  // the head's gradient in the buffer and the embedding's partial.
  CHECK(p.peak.transient >= 2 * partial);
  // Beyond every parameter's gradient (bf16 as the bf16 weights, all trained) one V x H
  // only: no out-of-place sum beside them.
  const int64_t beyond = p.peak.transient + p.peak.gradients - p.peak.parameters;
  CHECK(beyond >= partial);
  CHECK(beyond < partial + partial / 2);
}

TEST_CASE("TRL fused head: its backward receives a gradient a token, not one of the hidden copy") {
  // The oracle (bench/oracle grid, trl-sft[trl]/llama-3.2-1b/lora/none/b1s512): the peak,
  // at the end of the head's backward, holds the [511, 32768] bf16 tile, the fp32
  // grad_hidden and its bf16 cast (37.9 MiB of transients); grad_logprobs is 511 fp32.
  // Priced as the saved hidden copy's size, the output's gradient was 2 MiB more.
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b/config.json";
  s.gpu = "h200";
  s.stack = Stack::kHfTrainer;
  s.precision = Precision::kBf16Pure;
  s.mode = TrainMode::kLora;
  s.lora.rank = 16;
  s.lora.targets = {"q_proj", "v_proj"};
  s.lora.dropout = 0.05;
  s.micro_batch = 1;
  s.seq_len = 512;
  s.optimizer_impl = OptimizerImpl::kFused;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}, {"trl", "1.16.0"}};
  const Prediction p = predict_as_given(s);
  const int64_t tokens = 512;
  const int64_t tile = tokens * kTrlVocabTile * 2;
  const int64_t grad_hidden = tokens * 2048 * 4;  // fp32, then its bf16 cast: half of it again
  // The head's forward (the tile, the compact copy saved) ties with its backward now.
  CHECK(p.where.block_name == "head");
  MESSAGE("transient at the peak " << p.peak_as_allocated.transient << " B, " << p.where.phase);
  CHECK(p.peak_as_allocated.transient >= tile + grad_hidden + grad_hidden / 2);
  CHECK(p.peak_as_allocated.transient < tile + grad_hidden + grad_hidden / 2 + (1 << 20));
}

}  // namespace headroom::planner
