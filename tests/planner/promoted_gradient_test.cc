// A mul that promoted a 16-bit input computes that input's gradient in fp32 and the
// engine casts it back (planner/time/backward_gradients.cc, promoted_gradient): T5's
// gated feed-forward, act(wi_0(x)) * wi_1(x), is fp32 times bf16 under the Trainer's
// autocast (gelu_new's pow is on autocast's fp32 list). The meta-device oracle (env hf5,
// hf-trainer/flan-t5-xl-2l/lora/bf16/non-reentrant) shows three fp32 products of the
// feed-forward's size live at that mul's backward: its saved fp32 factor and both
// gradients.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "planner/predict/model_context.h"
#include "planner/time/backward_gradients.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

constexpr int64_t kBatch = 2;
constexpr int64_t kSeq = 512;


int node_index(const graph::LayerGraph& graph, const std::string& name) {
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (graph.nodes[n].name == name) return static_cast<int>(n);
  }
  FAIL("no node " << name);
  return -1;
}

}  // namespace

TEST_CASE("the gated mul's backward holds the bf16 factor's gradient in fp32 beside its cast") {
  Result<ModelContext> context = prepare_context(flan_t5_xl_lora(128));
  REQUIRE(context.is_ok());
  const ModelContext& c = context.value();
  std::vector<int64_t> bytes(c.graph.tensors.size());
  for (size_t t = 0; t < bytes.size(); ++t) {
    bytes[t] = graph::tensor_bytes(c.graph.tensors[t], c.compute_dtype, kBatch, kSeq);
  }
  const std::vector<bool> arriving(bytes.size(), false);
  const BackwardGradients gradients(c.graph, c.analysis, bytes, arriving, c.compute_dtype, kBatch, kSeq,
                                    Accounting::kAllocated, 0);
  const int64_t ffn = kBatch * kSeq * 5120;  // flan-t5-xl's d_ff
  const std::string ff = "encoder.block.1.layer.1.DenseReluDense.";
  // Gated output's gradient (fp32), gelu's (fp32), wi_1's in fp32 and its bf16 cast.
  CHECK(gradients.at_node(node_index(c.graph, ff + "gated")) == ffn * (4 + 4 + 4 + 2));
  // gelu_new's last product, 0.5 * x (bf16) times (1 + tanh(...)) (fp32): the same.
  CHECK(gradients.at_node(node_index(c.graph, ff + "act.gelu")) == ffn * (4 + 4 + 4 + 2));
}

}  // namespace headroom::planner
