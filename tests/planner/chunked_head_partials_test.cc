// torchtune's eager chunked output applies the output projection once per chunk
// (TransformerDecoder.chunked_output, torchtune/modules/transformer.py 0.6.1), so the
// weight's gradient reaches autograd's input buffer as one partial per chunk
// (torch/csrc/autograd/input_buffer.cpp accumulate): the second partial is summed out
// of place beside the first (a transposed view), later ones in place; a tied
// embedding's partial then adds in place into that fresh sum. The engine frees each
// chunk's logits gradient as its mm backward returns (torch/csrc/autograd/engine.cpp
// evaluate_function), so the head peaks without the chunks already done. docs/stacks.md,
// "Shared weights' gradients"; planner/time/backward_gradients.cc own_partials.
#include <doctest/doctest.h>

#include <string>

#include "planner/predict/planner.h"
#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

// Llama 3.2 3B (tied embeddings, 128256 x 3072) in pure bf16 at 1 x 1024.
RunSettings llama_32_3b_torchtune() {
  RunSettings settings;
  settings.model = std::string(HEADROOM_SOURCE_DIR) + "/bench/accuracy/models/llama-3.2-3b/config.json";
  settings.precision = Precision::kBf16Pure;
  settings.seq_len = 1024;
  return settings;
}

int head_linear(const graph::LayerGraph& graph) {
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const graph::Node& node = graph.nodes[i];
    if (node.block + 1 == static_cast<int>(graph.blocks.size()) && node.linear) return static_cast<int>(i);
  }
  return -1;
}

StepProfile profiled(const ModelContext& context) {
  return profile_step(context.graph, context.analysis, context.compute_dtype, 1, 1024, Accounting::kAllocated,
                      context.gpu, {}, {}, 2);
}

TEST_CASE("a chunked head's weight gradient comes in partials, the tied embedding's sum goes in place") {
  Result<ModelContext> context = prepare_context(llama_32_3b_torchtune());
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const int head = head_linear(context->graph);
  REQUIRE(head >= 0);
  REQUIRE(context->graph.nodes[static_cast<size_t>(head)].weight_uses == 1);
  const StepProfile one = profiled(context.value());
  context->graph.nodes[static_cast<size_t>(head)].weight_uses = 8;
  const StepProfile chunked = profiled(context.value());
  const int64_t partial = int64_t{128256} * 3072 * 2;
  // The head: the second chunk's partial and the out-of-place sum beside the first. By
  // then the two chunks' mm backwards have returned: their 2 of 8 logits gradients
  // are freed, and of the hidden states' gradient only their 2 of 8 pieces are made.
  const int64_t logits_grad = int64_t{1024} * 128256 * 2;
  const int64_t hidden_grad = int64_t{1024} * 3072 * 2;
  CHECK(chunked.blocks.back().bwd_peak_from_param_grads - one.blocks.back().bwd_peak_from_param_grads ==
        2 * partial - logits_grad * 2 / 8 - hidden_grad * 6 / 8);
  // The embedding: its partial adds in place into the chunks' fresh sum, one copy, not two.
  CHECK(one.blocks.front().bwd_peak - chunked.blocks.front().bwd_peak == partial);
}

TEST_CASE("torchtune's eager chunked loss marks its head with one weight use per chunk, the compiled one splits it") {
  RunSettings settings = llama_32_3b_torchtune();
  settings.stack = Stack::kTorchtune;
  settings.loss = LossSpec{LossImpl::kChunked, 8};
  Result<ModelContext> eager = prepare_context(settings);
  REQUIRE_MESSAGE(eager.is_ok(), eager.message());
  CHECK(eager->graph.nodes[static_cast<size_t>(head_linear(eager->graph))].weight_uses == 8);
  settings.compile = true;
  Result<ModelContext> compiled = prepare_context(settings);
  REQUIRE_MESSAGE(compiled.is_ok(), compiled.message());
  for (const graph::Node& node : compiled->graph.nodes) CHECK(node.weight_uses == 1);
}

TEST_CASE("a chunked head's summed gradient is in flight, not a gradient, at the tied embedding's backward") {
  // torchtune's Qwen2.5-0.5B full fine-tune at 1 x 512 with non-reentrant checkpointing
  // peaks at the embedding's backward (the oracle): the chunks' sum waits in autograd's
  // input buffer, the embedding's partial added into it in place.
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/qwen2.5-0.5b/config.json";
  s.gpu = "h200";
  s.stack = Stack::kTorchtune;
  s.precision = Precision::kBf16Pure;
  s.mode = TrainMode::kFull;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.optimizer_impl = OptimizerImpl::kFused;
  s.loss = LossSpec{LossImpl::kChunked, 8};
  s.micro_batch = 1;
  s.seq_len = 512;
  const Prediction p = predict_as_given(s);
  REQUIRE(p.where.phase == "backward");
  REQUIRE(p.where.block == 0);
  const int64_t tied = int64_t{151936} * 896 * 2;
  // The parameters less qwen2()'s shared fp32 RoPE cache, a buffer (models/rope_caches.h).
  const double weights = static_cast<double>(p.peak.parameters - p.peak.buffers);
  CHECK(p.peak.gradients + tied == doctest::Approx(weights).epsilon(0.01));
}

}  // namespace
}  // namespace headroom::planner
