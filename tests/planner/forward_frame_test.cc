// What a model's forward keeps in its frame to the forward's end: ViTModel.forward
// rebinds pixel_values to its copy in the patch projection's dtype
// (`pixel_values.to(expected_dtype)`, transformers 5.23.0 modeling_vit.py) and holds it
// until it returns. models/vision.cc holds the input; planner/mechanisms/autocast.cc
// turns that into the 16-bit copy over a 16-bit model; graph/graph_analysis.cc
// (held_in_forward), BlockProfile::forward_frame and walk_step price it in forward only.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "planner/predict/step_model.h"
#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

int index_of_tensor(const graph::LayerGraph& graph, const std::string& name) {
  for (size_t t = 0; t < graph.tensors.size(); ++t) {
    if (graph.tensors[t].name == name) return static_cast<int>(t);
  }
  FAIL("no tensor " << name);
  return -1;
}

const graph::Node& node_named(const graph::LayerGraph& graph, const std::string& name) {
  const auto it = std::find_if(graph.nodes.begin(), graph.nodes.end(), [&](const graph::Node& n) { return n.name == name; });
  REQUIRE_MESSAGE(it != graph.nodes.end(), name);
  return *it;
}

TEST_CASE("ViTModel holds its bf16 copy of pixel_values to the forward's end, not into backward") {
  RunSettings settings = hf_vit_b16(TrainMode::kLora);
  const ModelContext context = prepared_context(settings);
  const std::string copy = "vit.embeddings.patch_embeddings.projection.cast:pixel_values";
  const graph::Node& layernorm = node_named(context.graph, "vit.layernorm");
  CHECK(std::count(layernorm.holds.begin(), layernorm.holds.end(), copy) == 1);
  CHECK(std::count(layernorm.holds.begin(), layernorm.holds.end(), "pixel_values") == 0);
  const int t = index_of_tensor(context.graph, copy);
  CHECK(context.analysis.held_in_forward[t]);
  CHECK_FALSE(context.analysis.persistent[t]);
  const StepProfile profile = profile_step(context.graph, context.analysis, context.compute_dtype, 32, context.seq_len,
                                           Accounting::kAllocated, context.gpu);
  // bf16 pixel_values, as the graph sizes them: B * 197 rows of 3 * 16 * 16 pixels (one
  // row more than the 196 patches, models/vit.cc), about [32, 3, 224, 224].
  const int64_t copy_bytes = int64_t{32} * 197 * 768 * 2;
  CHECK(profile.blocks[0].forward_frame == copy_bytes);
  for (size_t b = 1; b < profile.blocks.size(); ++b) CHECK(profile.blocks[b].forward_frame == 0);
  // Full fine-tune: the projection saves that copy for its weight gradient, so it is
  // an activation already, not held again.
  const ModelContext full = prepared_context(hf_vit_b16(TrainMode::kFull));
  CHECK(profile_step(full.graph, full.analysis, full.compute_dtype, 32, full.seq_len, Accounting::kAllocated, full.gpu)
            .blocks[0]
            .forward_frame == 0);
  // An fp32 model under autocast: ViTModel's .to is a no-op, autocast's cast a transient.
  settings.precision = Precision::kBf16Mixed;
  const ModelContext mixed = prepared_context(settings);
  CHECK(std::count(node_named(mixed.graph, "vit.layernorm").holds.begin(),
                   node_named(mixed.graph, "vit.layernorm").holds.end(), copy) == 0);
}

TEST_CASE("what the forward's frame holds is transient in every later forward block and gone in backward") {
  StepModel model;
  model.base = 1000;
  model.grads_bwd = {0, 0};
  BlockProfile block;
  block.keep = 100;
  block.fwd_peak = 100;
  block.fwd_peak_saved = 100;
  block.bwd_peak = 100;
  block.bwd_peak_saved = 100;
  block.on_autograd = true;
  model.blocks = {block, block};
  model.copy_ms = {0, 0};
  const std::vector<BlockChoice> keep = {BlockChoice::kKeep, BlockChoice::kKeep};
  const StepPeak without = walk_step(model, keep, 0);
  model.blocks[0].forward_frame = 500;
  const StepPeak with = walk_step(model, keep, 0);
  REQUIRE(with.phase == "forward");
  REQUIRE(with.block == 1);
  CHECK(with.bytes == 1000 + 100 + 500 + 100);
  CHECK(with.transient == 500);
  CHECK(with.activations == 100 + 100);
  CHECK(without.bytes == 1000 + 100 + 100);  // backward: the same without the frame
}

}  // namespace
}  // namespace headroom::planner
