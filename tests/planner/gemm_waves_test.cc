// Tile and wave quantization of GEMMs (planner/time/gemm_waves.h): the share of the
// SMs' tile slots that hold useful output, and what it does to a linear node's time.
#include <doctest/doctest.h>

#include "graph/graph_analysis.h"
#include "models/graph_builder.h"
#include "models/layers.h"
#include "planner/time/block_profile.h"
#include "planner/time/gemm_waves.h"
#include "planner/settings/hardware.h"

namespace headroom::planner {

TEST_CASE("a 1792 x 1792 output is one wave of 98 tiles on the A100's 108 SMs") {
  // The worked example of NVIDIA's guide and of Horace He's "What Shapes Do Matrix
  // Multiplications Like?": 1792/256 x 1792/128 = 7 x 14 tiles, one wave.
  CHECK(gemm_wave_utilisation(1792, 1792, 1792, 108) == doctest::Approx(98.0 / 108.0));
}

TEST_CASE("a 2048 x 2048 output needs a second wave that is mostly empty") {
  // 8 x 16 = 128 tiles: 108 in the first wave, 20 in the second.
  CHECK(gemm_wave_utilisation(2048, 2048, 2048, 108) == doctest::Approx(128.0 / 216.0));
  CHECK(gemm_wave_utilisation(2048 * 27, 2048, 2048, 108) == doctest::Approx(1.0));  // 27 x 128 = 32 waves
}

TEST_CASE("an edge tile that is partly outside the output costs a whole tile") {
  // ViT-H at batch 8: 8 x 257 = 2056 rows against 1280 columns on 66 SMs. As 128 x 256
  // tiles: 17 x 5 = 85 tiles filled to 2056 x 1280 / (85 x 32768), in two waves of 66.
  const double filled = 2056.0 * 1280.0 / (85.0 * 128 * 256);
  CHECK(gemm_wave_utilisation(2056, 1280, 1280, 66) == doctest::Approx(filled * 85.0 / 132.0));
}

TEST_CASE("an output of fewer tiles than SMs is split along a deep reduction") {
  // 256 x 4096: 32 tiles; split 3 ways (108 / 32) along K = 4096: 96 of 108 slots.
  CHECK(gemm_wave_utilisation(256, 4096, 4096, 108) == doctest::Approx(96.0 / 108.0));
  // A LoRA-thin reduction (rank 16) is not split: 32 of 108 slots.
  CHECK(gemm_wave_utilisation(256, 4096, 16, 108) == doctest::Approx(32.0 / 108.0));
}

TEST_CASE("an unknown SM count leaves the GEMM at its full rate") {
  CHECK(gemm_wave_utilisation(2048, 2048, 2048, 0) == 1.0);
}

TEST_CASE("a linear node's compute-bound time stretches by its wave utilisation, FLOPs for MFU do not") {
  // [2 x 1024 tokens, 2048] x [2048, 2048]^T on the A100: output 2048 x 2048 fills
  // 128 of 216 tile slots, so its forward runs 216/128 times the best-shape time.
  models::GraphBuilder b;
  b.begin_block("layer", "layer", true);
  const int64_t width = 2048;
  const std::string x = b.input("x", models::times(models::tokens(), width), std::nullopt, true);
  const std::string y = b.linear("proj", x, models::tokens(), width, width, false);
  models::OpSpec loss{"loss", "loss", {y}, graph::SizeExpr::constant(1), graph::DType::kF32, {}, {}, {}, {}, {}, {}};
  b.op(loss);
  const graph::LayerGraph graph = b.finish();
  const graph::GraphAnalysis analysis = graph::analyze_graph(graph);
  const int proj = graph.producer_of(y);
  REQUIRE(proj >= 0);
  GpuSpec gpu = find_gpu("a100-80g").value();
  REQUIRE(gpu.sm_count == 108);
  TimeModelOptions options;
  options.matmul_efficiency = 0.8;
  const double flops = 2.0 * 2048 * width * width;
  const double best_shape_ms = flops / (gpu.bf16_tflops * 1e12 * 0.8) * 1e3;
  const NodeTimes times = node_times(graph, analysis, proj, graph::DType::kBF16, 2, 1024, gpu, options);
  CHECK(times.fwd_flops == doctest::Approx(flops));
  CHECK(times.fwd_ms == doctest::Approx(best_shape_ms * 216.0 / 128.0 + 0.005));
  // Backward: dX into [2048, 2048] and dW into [2048, 2048], each stretched alike.
  CHECK(times.bwd_flops == doctest::Approx(2 * flops));
  CHECK(times.bwd_ms == doctest::Approx(2 * best_shape_ms * 216.0 / 128.0 + 2 * 0.005));
  gpu.sm_count = 0;  // no SM count: the best-shape rate
  CHECK(node_times(graph, analysis, proj, graph::DType::kBF16, 2, 1024, gpu, options).fwd_ms ==
        doctest::Approx(best_shape_ms + 0.005));
}

}  // namespace headroom::planner
