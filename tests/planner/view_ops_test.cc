// Eager kernel time of ops that return views (planner/time/block_profile.cc
// node_times): torch.chunk, split and unbind run no kernel in forward; their
// backward writes the gradient of the whole input.
#include <doctest/doctest.h>

#include "graph/graph_analysis.h"
#include "models/graph_builder.h"
#include "models/layers.h"
#include "planner/time/block_profile.h"
#include "planner/settings/hardware.h"
#include "planner/predict/planner.h"

namespace headroom::planner {

TEST_CASE("a split is a view in forward and a cat of the gradients in backward") {
  models::GraphBuilder b;
  b.begin_block("layer", "layer", true);
  const int64_t width = 4096;
  const std::string x = b.input("x", models::times(models::tokens(), 2 * width), std::nullopt, true);
  const auto halves = b.split("chunk", x, {{"x1", models::times(models::tokens(), width)},
                                           {"x2", models::times(models::tokens(), width)}});
  const std::string gated = b.mul("gate", halves[0], halves[1], models::times(models::tokens(), width));
  models::OpSpec loss{"loss", "loss", {gated}, graph::SizeExpr::constant(1), graph::DType::kF32, {}, {}, {}, {},
                      {}, {}};
  b.op(loss);
  const graph::LayerGraph graph = b.finish();
  const graph::GraphAnalysis analysis = graph::analyze_graph(graph);
  const GpuSpec gpu = find_gpu("a100-80g").value();
  const int chunk = graph.producer_of("x1");
  REQUIRE(chunk >= 0);
  const NodeTimes times = node_times(graph, analysis, chunk, graph::DType::kBF16, 2, 4096, gpu, TimeModelOptions{});
  CHECK(times.fwd_ms == 0.0);
  // Backward reads both halves' gradients and writes the input's: 2 x (2 x width) bf16
  // values per token at 70% of 2039 GB/s, plus two launches.
  const double bytes = 2.0 * (2 * 4096) * (2 * width) * 2;
  CHECK(times.bwd_ms == doctest::Approx(bytes / (gpu.memory_bandwidth_gbps * 1e9 * 0.7) * 1e3 + 2 * 0.005));
}

TEST_CASE("compiled, a split between a matmul and attention is still a view: no kernel in forward") {
  RunSettings run;
  run.model = "eva-vit-g";  // BLIP-2's ViT-g: one qkv linear, split into q, k, v for SDPA
  run.gpu = "a100-80g";
  run.precision = Precision::kBf16Pure;
  run.compile = true;
  Result<ModelContext> context = prepare_context(run);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  REQUIRE(context->time_options.fused != nullptr);
  const int split = context->graph.producer_of("vision_model.encoder.layers.0.self_attn.query");
  REQUIRE(split >= 0);
  REQUIRE(context->graph.nodes[split].op == "split");
  REQUIRE(context->time_options.fused->kernel_of[split] >= 0);  // its own one-node "kernel"
  const NodeTimes times = node_times(context->graph, context->analysis, split, context->compute_dtype, 2, 257,
                                     context->gpu, context->time_options);
  CHECK(times.fwd_ms == 0.0);
  CHECK(times.bwd_ms > 0.0);  // the cat of the q, k, v gradients
}

}  // namespace headroom::planner
