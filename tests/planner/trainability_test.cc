// LoRA adapters on a linear (planner/trainability.cc, add_lora): what backward
// computes for a frozen base weight and its adapters.
#include <doctest/doctest.h>

#include <string>

#include "graph/graph_json.h"
#include "planner/trainability.h"

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

}  // namespace headroom::planner
