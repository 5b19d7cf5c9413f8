// LoRA adapters on a linear (planner/mechanisms/trainability.cc, add_lora): what backward
// computes for a frozen base weight and its adapters.
#include <doctest/doctest.h>

#include <string>

#include "graph/graph_analysis.h"
#include "graph/graph_json.h"
#include "planner/time/block_profile.h"
#include "planner/settings/hardware.h"
#include "planner/mechanisms/trainability.h"

namespace headroom::planner {

TEST_CASE("a frozen base linear with LoRA: dX for base and adapters, dW for the adapters only") {
  Result<graph::LayerGraph> base =
      graph::load_graph_file(std::string(HEADROOM_SOURCE_DIR) + "/tests/data/toy_mlp.json");
  REQUIRE_MESSAGE(base.is_ok(), base.message());
  const graph::Node* fc = nullptr;
  for (const graph::Node& node : base->nodes) {
    if (node.linear) fc = &node;
  }
  REQUIRE(fc != nullptr);
  RunSettings settings;
  settings.mode = TrainMode::kLora;
  settings.lora.rank = 4;
  settings.lora.targets = {fc->name};
  Result<graph::LayerGraph> lora = apply_training_mode(base.value(), settings);
  REQUIRE_MESSAGE(lora.is_ok(), lora.message());
  const graph::Node& adapted = *lora->find_node(fc->name);
  const graph::LinearInfo& shape = *fc->linear;
  const graph::SizeExpr adapter = shape.rows.scaled(2 * 4 * (shape.in_features + shape.out_features));
  CHECK(adapted.fwd_flops == fc->fwd_flops + adapter);
  CHECK(adapted.bwd_input_flops == fc->bwd_input_flops + adapter);
  // Not the base's dW (2 * rows * in * out): it is frozen.
  CHECK(adapted.bwd_param_flops == adapter);

}

TEST_CASE("a 4-bit base weight is dequantized by a kernel of its own before each GEMM that reads it") {
  Result<graph::LayerGraph> base =
      graph::load_graph_file(std::string(HEADROOM_SOURCE_DIR) + "/tests/data/toy_mlp.json");
  REQUIRE(base.is_ok());
  RunSettings settings;
  settings.lora.rank = 4;
  settings.lora.targets = {"fc1", "fc2"};  // fc1's adapters train: fc2 needs dX
  settings.mode = TrainMode::kLora;
  Result<graph::LayerGraph> lora = apply_training_mode(base.value(), settings);
  settings.mode = TrainMode::kQlora;
  Result<graph::LayerGraph> qlora = apply_training_mode(base.value(), settings);
  REQUIRE(lora.is_ok());
  REQUIRE(qlora.is_ok());
  const GpuSpec gpu = find_gpu("a100-80g").value();
  const auto times = [&](const graph::LayerGraph& graph) {
    const graph::GraphAnalysis analysis = graph::analyze_graph(graph);
    for (size_t n = 0; n < graph.nodes.size(); ++n) {
      if (graph.nodes[n].name == "mlp.0.fc2") {
        return node_times(graph, analysis, static_cast<int>(n), graph::DType::kBF16, 4, 128, gpu, {});
      }
    }
    FAIL("no fc2");
    return NodeTimes{};
  };
  // fc2's weight: 64 x 256; read at half a byte, written as bf16; 70% of 2,039 GB/s; one launch.
  const double dequantize = 64.0 * 256 * (0.5 + 2) / (2039e9 * 0.7) * 1e3 + 0.005;
  const NodeTimes l = times(lora.value());
  const NodeTimes q = times(qlora.value());
  CHECK(q.fwd_ms - l.fwd_ms == doctest::Approx(dequantize).epsilon(1e-4));
  // fc2's input needs a gradient: dX = dY W dequantizes again.
  CHECK(q.bwd_ms - l.bwd_ms == doctest::Approx(dequantize).epsilon(1e-4));
}

}  // namespace headroom::planner
