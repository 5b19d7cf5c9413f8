// The attention kernel a run uses (--attention): flex_attention keeps what SDPA
// keeps plus its f32 row maxima, and runs at FlexAttention's measured speed
// against FlashAttention-2; flash-attn's Triton kernel keeps what SDPA keeps and
// runs at its published speed against FlashAttention-2. docs/stacks.md,
// "Attention kernels".
#include <doctest/doctest.h>

#include <string>

#include "planner/time/block_profile.h"
#include "planner/settings/validate_settings.h"
#include "planner/mechanisms/document_mask.h"
#include "planner/predict/planner.h"
#include "planner/mechanisms/selective_checkpoint.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

RunSettings torchtune_1b(models::AttentionImpl attention) { return torchtune_llama_1b(false, attention); }

int node_named(const graph::LayerGraph& graph, const std::string& name) {
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (graph.nodes[n].name == name) return static_cast<int>(n);
  }
  FAIL("no node " << name);
  return -1;
}

// The times of `node` at B = 2, S = 1024 on the context's GPU.
NodeTimes times_at_1024(const ModelContext& context, const std::string& node) {
  return node_times(context.graph, context.analysis, node_named(context.graph, node), context.compute_dtype, 2, 1024,
                    context.gpu, context.time_options);
}

}  // namespace

TEST_CASE("flex attention keeps one more f32 value per token and head than SDPA, in every layer") {
  const Prediction sdpa = predict_as_given(torchtune_1b(models::AttentionImpl::kSdpa));
  const Prediction flex = predict_as_given(torchtune_1b(models::AttentionImpl::kFlex));
  // Llama-3.2-1B: 16 layers, 32 heads; B*S = 2048 tokens; max_scores is f32.
  const int64_t max_scores = 2 * 1024 * 32 * 4;
  CHECK(flex.peak_allocated - sdpa.peak_allocated == 16 * max_scores);
}

TEST_CASE("flex attention runs at 90% of FlashAttention-2's speed forward, 85% backward") {
  Result<ModelContext> sdpa = prepare_context(torchtune_1b(models::AttentionImpl::kSdpa));
  Result<ModelContext> flex = prepare_context(torchtune_1b(models::AttentionImpl::kFlex));
  REQUIRE(sdpa.is_ok());
  REQUIRE(flex.is_ok());
  const NodeTimes s = times_at_1024(sdpa.value(), "model.layers.3.self_attn.sdpa");
  const NodeTimes f = times_at_1024(flex.value(), "model.layers.3.self_attn.flex");
  // The same FLOPs (causal: half of 4*S^2*heads*head_dim per sample) ...
  CHECK(f.fwd_flops == s.fwd_flops);
  CHECK(f.fwd_flops == doctest::Approx(2.0 * 2 * 1024.0 * 1024 * 32 * 64));
  // ... compute-bound at this size, so the time is the FLOP time over the speed
  // (FlashAttention-2 forward on an A100: 73% of its peak, tests/planner/gpu_efficiency_test.cc).
  const double launch = 0.005;
  CHECK(s.fwd_ms - launch == doctest::Approx(s.fwd_flops / (312e12 * 0.73) * 1e3));
  CHECK(f.fwd_ms - launch == doctest::Approx((s.fwd_ms - launch) / 0.90));
  CHECK(f.bwd_ms - 2 * launch == doctest::Approx((s.bwd_ms - 2 * launch) / 0.85));
}

TEST_CASE("flash-attn's Triton kernel keeps what SDPA keeps and runs 1.4x slower forward, 2x backward") {
  // Its forward saves q, k, v, o and the logsumexp, as SDPA's flash backend does.
  CHECK(predict_as_given(torchtune_1b(models::AttentionImpl::kTritonFlash)).peak_allocated ==
        predict_as_given(torchtune_1b(models::AttentionImpl::kSdpa)).peak_allocated);
  Result<ModelContext> sdpa = prepare_context(torchtune_1b(models::AttentionImpl::kSdpa));
  Result<ModelContext> triton = prepare_context(torchtune_1b(models::AttentionImpl::kTritonFlash));
  REQUIRE(sdpa.is_ok());
  REQUIRE(triton.is_ok());
  const NodeTimes s = times_at_1024(sdpa.value(), "model.layers.3.self_attn.sdpa");
  const NodeTimes t = times_at_1024(triton.value(), "model.layers.3.self_attn.triton_flash");
  CHECK(t.fwd_flops == s.fwd_flops);
  // FlashAttention-2 is "around 1.3-1.5x faster ... in the forward pass and around 2x
  // faster in the backward pass" (arXiv 2307.08691, Sec. 4.1).
  const double launch = 0.005;
  CHECK(t.fwd_ms - launch == doctest::Approx((s.fwd_ms - launch) * 1.4));
  CHECK(t.bwd_ms - 2 * launch == doctest::Approx((s.bwd_ms - 2 * launch) * 2.0));
  // torchtitan's op-level selective checkpointing saves what aten's SDPA ops return;
  // the Triton kernel is an autograd.Function the policy does not name: recomputed.
  const int layer = block_ending(sdpa->graph, ".layers.3");
  const auto kept_with_sdpa = selective_op_saves(sdpa->graph, sdpa->analysis)[layer];
  const auto kept_with_triton = selective_op_saves(triton->graph, triton->analysis)[layer];
  CHECK(kept_with_triton.size() + 2 == kept_with_sdpa.size());  // all but its output and logsumexp
}

TEST_CASE("a document mask visits the tiles of each document's causal block, not the row's") {
  // A 4096-token row is 32 tiles of 128: 32 * 33 / 2 = 528 causal tiles.
  CHECK(document_mask_work(4096, 4096) == 1.0);
  CHECK(document_mask_work(8192, 4096) == 1.0);
  // 512-token documents at random offsets span 1 + 511/128 tiles each; 8 of them.
  const double m = 1 + 511.0 / 128;
  CHECK(document_mask_work(512, 4096) == doctest::Approx(8 * m * (m + 1) / 2 / 528));
  CHECK(document_mask_work(128, 4096) < document_mask_work(512, 4096));
  CHECK(document_mask_work(512, 4096) < document_mask_work(2048, 4096));
  CHECK(document_mask_work(1, 4096) > 0);
}

TEST_CASE("--document-tokens scales flex attention's FLOPs and nothing else") {
  RunSettings packed = torchtune_1b(models::AttentionImpl::kFlex);
  packed.document_tokens = 256;
  Result<ModelContext> whole = prepare_context(torchtune_1b(models::AttentionImpl::kFlex));
  Result<ModelContext> documents = prepare_context(packed);
  REQUIRE(whole.is_ok());
  REQUIRE(documents.is_ok());
  const int flex = node_named(whole->graph, "model.layers.3.self_attn.flex");
  const double work = document_mask_work(256, 1024);
  CHECK(static_cast<double>(documents->graph.nodes[flex].fwd_flops.at(2, 1024)) ==
        doctest::Approx(work * static_cast<double>(whole->graph.nodes[flex].fwd_flops.at(2, 1024))));
  CHECK(static_cast<double>(documents->graph.nodes[flex].bwd_input_flops.at(2, 1024)) ==
        doctest::Approx(work * static_cast<double>(whole->graph.nodes[flex].bwd_input_flops.at(2, 1024))));
  const int q_proj = node_named(whole->graph, "model.layers.3.self_attn.q_proj");
  CHECK(documents->graph.nodes[q_proj].fwd_flops == whole->graph.nodes[q_proj].fwd_flops);
  // The saves do not depend on the mask.
  CHECK(predict_as_given(packed).peak_allocated ==
        predict_as_given(torchtune_1b(models::AttentionImpl::kFlex)).peak_allocated);
}

TEST_CASE("an SD3 run takes a T5 length and refuses resident text encoders by name") {
  RunSettings s = torchtune_1b(models::AttentionImpl::kSdpa);
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/sd3.5-large-2l";
  s.text_tokens = 256;
  REQUIRE_MESSAGE(prepare_context(s).is_ok(), prepare_context(s).message());
  s.precomputed_text_embeddings = false;
  const Result<ModelContext> context = prepare_context(s);
  REQUIRE_FALSE(context.is_ok());
  CHECK(context.message().find("precomputed_text_embeddings") == 0);
}

TEST_CASE("a T5 length is refused for a model without a T5 input, naming the field") {
  RunSettings s = torchtune_1b(models::AttentionImpl::kSdpa);
  s.text_tokens = 77;
  const Result<ModelContext> context = prepare_context(s);
  REQUIRE_FALSE(context.is_ok());
  CHECK(context.message().find("text_tokens: ") == 0);
  CHECK(context.message().find("expected text_tokens only for a Flux or SD3 model") != std::string::npos);
}

TEST_CASE("a document length is refused without flex attention, naming the field") {
  RunSettings s = torchtune_1b(models::AttentionImpl::kSdpa);
  s.document_tokens = 256;
  const Status status = validate_settings(s, "run.json");
  REQUIRE_FALSE(status.is_ok());
  CHECK(status.message().find("run.json: document_tokens: ") == 0);
  CHECK(status.message().find("expected attention flex") != std::string::npos);
}

}  // namespace headroom::planner
