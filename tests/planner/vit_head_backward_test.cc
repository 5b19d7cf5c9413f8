// Two mechanisms of a pre-norm ViT layer and head under the Trainer's bf16 autocast,
// seen on the meta-device oracle (hf-trainer/vit-base-patch16-224/full/bf16/none/128):
// - the classifier reads the class token, a view `sequence_output[:, 0, :]` of the final
//   layernorm's fp32 output (transformers 5.23.0 modeling_vit.py), and autocast casts that
//   view, [B, hidden], not the [B, S, hidden] under it (planner/mechanisms/autocast.cc,
//   cast_elements);
// - the last linear of a layer (ViTOutput.dense, then `+ input_tensor`) runs backward on
//   the gradient the residual add hands on as is, the layer's out_grad, not on a copy of
//   it (planner/time/backward_gradients.cc, gradient_is_out_grad).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

const graph::Tensor& tensor_named(const graph::LayerGraph& graph, const std::string& name) {
  const auto it = std::find_if(graph.tensors.begin(), graph.tensors.end(),
                               [&](const graph::Tensor& t) { return t.name == name; });
  REQUIRE_MESSAGE(it != graph.tensors.end(), name);
  return *it;
}

TEST_CASE("autocast casts the class token the ViT classifier reads, not the whole final norm output") {
  const ModelContext context = prepared_context(hf_vit_b16(TrainMode::kFull));
  const auto classifier = std::find_if(context.graph.nodes.begin(), context.graph.nodes.end(),
                                       [](const graph::Node& n) { return n.name == "classifier"; });
  REQUIRE(classifier != context.graph.nodes.end());
  const auto cast = std::find_if(classifier->inputs.begin(), classifier->inputs.end(),
                                 [](const std::string& input) { return input.starts_with("classifier.cast:"); });
  REQUIRE(cast != classifier->inputs.end());
  // One bf16 row of 768 a sample: at B = 32, 32 x 768 elements.
  CHECK(tensor_named(context.graph, *cast).elements.at(32, 197) == int64_t{32} * 768);
}

TEST_CASE("a pre-norm ViT layer's MLP output linear runs backward on the out_grad the residual add passes on") {
  const ModelContext context = prepared_context(hf_vit_b16(TrainMode::kFull));
  const int64_t batch = 128;
  const StepProfile profile = profile_step(context.graph, context.analysis, context.compute_dtype, batch,
                                           context.seq_len, Accounting::kAllocated, context.gpu);
  const BlockProfile& layer = profile.blocks[static_cast<size_t>(block_ending(context.graph, ".layer.11"))];
  const int64_t hidden = batch * 197 * 768 * 2;  // bf16 [B, 197, 768]
  CHECK(layer.out_grad == hidden);
  // The oracle's peak in layer 11's backward: the saved tensors, the out_grad and
  // output.dense's input gradient (mm, bf16 [B x 197, 3072]), and nothing else.
  CHECK(layer.bwd_peak - layer.keep == hidden + batch * 197 * 3072 * 2);
}

}  // namespace
}  // namespace headroom::planner
