// DeepSpeed ZeRO-3's linear saves its input whatever needs a gradient
// (runtime/zero/linear.py LinearFunctionForZeroStage3, DeepSpeed 0.19.8):
// planner/mechanisms/zero3_linear.h.
#include <doctest/doctest.h>

#include "planner/mechanisms/zero3_linear.h"

namespace headroom::planner {
namespace {

graph::Node linear(const std::string& name, bool trainable) {
  graph::Node node;
  node.name = name;
  node.op = "linear";
  node.inputs = {name + ".x"};
  node.linear = graph::LinearInfo{64, 64, {}};
  node.params.push_back({name + ".weight", {64, 64}, graph::DType::kBF16, trainable, ""});
  return node;
}

TEST_CASE("ZeRO-3's linear keeps a frozen linear's input when the input requires grad") {
  graph::LayerGraph graph;
  graph::Node frozen = linear("frozen", false);
  frozen.saves = {{"frozen.x", graph::SaveWhen::kParamGrad}};  // torch's: only for dW
  graph::Node trained = linear("trained", true);
  trained.saves = {{"trained.x", graph::SaveWhen::kParamGrad}};
  graph::Node lora_base = linear("lora", false);  // LoRA with dropout: torch's kept nothing of x
  lora_base.params.push_back({"lora.lora_A.weight", {4, 64}, graph::DType::kBF16, true, ""});
  graph.nodes = {frozen, trained, lora_base};
  CHECK(apply_zero3_linear(graph) == 2);
  CHECK(graph.nodes[0].saves[0].when == graph::SaveWhen::kAnyGrad);
  CHECK(graph.nodes[1].saves[0].when == graph::SaveWhen::kParamGrad);  // kept for dW already
  REQUIRE(graph.nodes[2].saves.size() == 1);
  CHECK(graph.nodes[2].saves[0].tensor == "lora.x");
  CHECK(graph.nodes[2].saves[0].when == graph::SaveWhen::kInputGrad);  // the base's own Function
}

}  // namespace
}  // namespace headroom::planner
