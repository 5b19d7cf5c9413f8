// DoRA on a LoRA-adapted linear (planner/mechanisms/dora.cc): the magnitude, PEFT's
// setup graph and what each forward keeps, against PEFT 0.21.2 and torchtune 0.6.1.
#include <doctest/doctest.h>

#include <string>

#include "graph/graph_json.h"
#include "planner/mechanisms/dora.h"
#include "planner/mechanisms/trainability.h"
#include "planner/memory/dora_setup.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {
namespace {

struct Adapted {
  graph::LayerGraph graph;
  graph::Node base;  // the linear before adapters
};

Adapted adapt(RunSettings settings) {
  Result<graph::LayerGraph> base =
      graph::load_graph_file(std::string(HEADROOM_SOURCE_DIR) + "/tests/data/toy_mlp.json");
  REQUIRE_MESSAGE(base.is_ok(), base.message());
  const graph::Node* fc = nullptr;
  for (const graph::Node& node : base->nodes) {
    if (node.linear) fc = &node;
  }
  REQUIRE(fc != nullptr);
  settings.mode = TrainMode::kLora;
  settings.lora.rank = 4;
  settings.lora.targets = {fc->name};
  Result<graph::LayerGraph> lora = apply_training_mode(base.value(), settings);
  REQUIRE_MESSAGE(lora.is_ok(), lora.message());
  return Adapted{lora.value(), *fc};
}

bool keeps(const graph::Node& node, const std::string& tensor) {
  for (const graph::SavedRef& saved : node.saves) {
    if (saved.tensor == tensor) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("PEFT DoRA: a trained magnitude, the setup norm's graph and two row-sized saves a linear") {
  RunSettings settings;
  settings.lora.dora = true;
  settings.lora.dropout = 0.05;
  const Adapted a = adapt(settings);
  const graph::Node& node = *a.graph.find_node(a.base.name);
  const int64_t in = a.base.linear->in_features;
  const int64_t out = a.base.linear->out_features;
  bool magnitude = false;
  for (const graph::Param& param : node.params) {
    if (param.name != node.name + ".lora_magnitude_vector.weight") continue;
    magnitude = true;
    CHECK(param.trainable);
    CHECK(param.shape == std::vector<int64_t>{out});
    CHECK(param.dtype == graph::DType::kF32);  // PEFT's autocast_adapter_dtype
  }
  CHECK(magnitude);
  // update_layer's norm graph: W + s·BA [out, in], the norm [out], A [r, in], B [out, r],
  // in the load dtype (bf16 here; fp32 weights under AMP), 512-byte rounded each.
  const int64_t setup = account(2 * out * in, Accounting::kAllocated) + account(2 * out, Accounting::kAllocated) +
                        account(2 * 4 * in, Accounting::kAllocated) + account(2 * out * 4, Accounting::kAllocated);
  CHECK(saved_dora_setup_bytes(a.graph, Precision::kBf16Mixed, Accounting::kAllocated) == setup);
  const int64_t setup_amp = account(4 * out * in, Accounting::kAllocated) + account(4 * out, Accounting::kAllocated) +
                            account(4 * 4 * in, Accounting::kAllocated) + account(4 * out * 4, Accounting::kAllocated);
  CHECK(saved_dora_setup_bytes(a.graph, Precision::kBf16Amp, Accounting::kAllocated) == setup_amp);
  // Each forward keeps the base output and B(A(x)), [rows, out] each, and with
  // dropout the 16-bit weight its second base matmul read.
  for (const char* kept : {".dora_base_result", ".dora_lora_result", ".dora_weight_copy", ".dora_scale", ".dora_norm"}) {
    CHECK_MESSAGE(keeps(node, node.name + kept), kept);
  }
  CHECK(a.graph.find_tensor(node.name + ".dora_base_result")->elements == a.base.linear->rows.scaled(out));
  CHECK(a.graph.find_tensor(node.name + ".dora_lora_result")->elements == a.base.linear->rows.scaled(out));
  CHECK(a.graph.find_tensor(node.name + ".dora_weight_copy")->elements == graph::SizeExpr::constant(out * in));
  // FLOPs: the adapters, B(A(I)) on an [in, in] identity, and the base matmul again.
  const graph::SizeExpr adapter = a.base.linear->rows.scaled(2 * 4 * (in + out));
  const graph::SizeExpr rerun = a.base.linear->rows.scaled(2 * in * out);
  CHECK(node.fwd_flops == a.base.fwd_flops + adapter + graph::SizeExpr::constant(2 * 4 * in * (in + out)) + rerun);
  CHECK(node.bwd_input_flops == a.base.bwd_input_flops + adapter + rerun);
}

TEST_CASE("PEFT DoRA without dropout reuses the base output: no second matmul and no weight copy") {
  RunSettings settings;
  settings.lora.dora = true;
  settings.lora.dropout = 0;
  const Adapted a = adapt(settings);
  const graph::Node& node = *a.graph.find_node(a.base.name);
  CHECK(keeps(node, node.name + ".dora_base_result"));
  CHECK_FALSE(keeps(node, node.name + ".dora_weight_copy"));
  CHECK(a.graph.find_tensor(node.name + ".dora_weight_copy") == nullptr);
}

TEST_CASE("torchtune DoRALinear: no setup graph (its magnitude is set under no_grad), no second matmul") {
  RunSettings settings;
  settings.stack = Stack::kTorchtune;
  settings.lora.dora = true;
  settings.lora.dropout = 0.05;
  const Adapted a = adapt(settings);
  const graph::Node& node = *a.graph.find_node(a.base.name);
  CHECK(saved_dora_setup_bytes(a.graph, Precision::kBf16Pure, Accounting::kAllocated) == 0);
  CHECK(keeps(node, node.name + ".dora_lora_result"));
  CHECK_FALSE(keeps(node, node.name + ".dora_weight_copy"));
}

TEST_CASE("plain LoRA has none of DoRA's tensors") {
  const Adapted a = adapt(RunSettings{});
  const graph::Node& node = *a.graph.find_node(a.base.name);
  CHECK(saved_dora_setup_bytes(a.graph, Precision::kBf16Mixed, Accounting::kAllocated) == 0);
  CHECK_FALSE(keeps(node, node.name + ".dora_base_result"));
  CHECK(node.params.size() == a.base.params.size() + 2);
}

TEST_CASE("DoRA needs adapters and a stack whose DoRA is priced") {
  RunSettings full;
  full.lora.dora = true;
  Status refused = validate_settings(full, "run");
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.message().find("lora.dora") != std::string::npos);
  RunSettings litgpt;
  litgpt.mode = TrainMode::kLora;
  litgpt.stack = Stack::kLitgpt;
  litgpt.lora.dora = true;
  CHECK_FALSE(validate_settings(litgpt, "run").is_ok());
}

}  // namespace headroom::planner
