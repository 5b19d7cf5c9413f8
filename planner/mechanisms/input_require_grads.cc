#include "planner/mechanisms/input_require_grads.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/op_traits.h"

namespace headroom::planner {
namespace {

bool reads(const graph::Node& node, const std::string& tensor) {
  return std::find(node.inputs.begin(), node.inputs.end(), tensor) != node.inputs.end();
}

// The graph inputs transformers models take their tokens and images in (their
// main_input_name); the builders in models/ name them so.
constexpr const char* kInputIds = "input_ids";
// T5's decoder stack reads the labels shifted right (models/t5.cc) through the same
// embedding, which is its own T5Stack's get_input_embeddings() too.
constexpr const char* kDecoderInputIds = "decoder_input_ids";
constexpr const char* kPixelValues = "pixel_values";

// Whether `node` reads the pixels: pixel_values itself, or its cast to the tower's
// dtype (Qwen2.5-VL's get_image_features: pixel_values.type(self.visual.dtype)), or
// autocast's cast of them, which the graph's autocast pass puts before the conv beside
// the cast of an fp32 weight (CLIPVisionEmbeddings.forward's
// pixel_values.to(dtype=target_dtype), transformers 5.23.0 models/clip/modeling_clip.py:
// a 16-bit copy under 16-bit weights, autocast's under fp32 ones).
bool reads_pixels(const graph::LayerGraph& graph, const graph::Node& node) {
  if (reads(node, kPixelValues)) return true;
  return std::any_of(node.inputs.begin(), node.inputs.end(), [&](const std::string& input) {
    const int producer = graph.producer_of(input);
    if (producer < 0) return false;
    const graph::Node& cast = graph.nodes[static_cast<size_t>(producer)];
    return (cast.op == graph::op::kToCopy || cast.op == graph::op::kCast) && reads(cast, kPixelValues);
  });
}

// A module get_input_embeddings() returns: a text model's token embedding, or a
// vision model's patch convolution (CLIPVisionModel's `_input_embed_layer` is
// "patch_embedding", Qwen2.5-VL's vision tower's "patch_embed", a Conv3d), which
// enable_input_require_grads hooks in every PreTrainedModel of a model whose own main
// input is input_ids (CLIPModel, LLaVA, Qwen2.5-VL; modeling_utils.py 5.23.0).
bool is_input_embedding(const graph::LayerGraph& graph, const graph::Node& node) {
  if (node.outputs.size() != 1) return false;
  const bool conv = node.op == graph::op::kConv2d || node.op == graph::op::kConv3d;
  const bool ids = reads(node, kInputIds) || reads(node, kDecoderInputIds);
  return (node.op == graph::op::kEmbedding && ids) || (conv && reads_pixels(graph, node));
}

// Whether a parameter of `node` is trained (a tied copy follows its original).
bool trains_a_param(const graph::Node& node, const std::unordered_map<std::string, bool>& trainable) {
  return std::any_of(node.params.begin(), node.params.end(), [&](const graph::Param& p) {
    if (p.tied_to.empty()) return p.trainable;
    const auto it = trainable.find(p.tied_to);
    return it != trainable.end() && it->second;
  });
}

// The output of the embedding module that `node` (its lookup) begins: the lookup's
// output, or that of the last op named inside the module reading it alone (Gemma's
// GemmaTextScaledWordEmbedding scales in its forward, "model.embed_tokens.embed_scale").
std::string module_output(const graph::LayerGraph& graph, const graph::Node& node) {
  std::string out = node.outputs.front();
  for (bool advanced = true; advanced;) {
    advanced = false;
    for (const graph::Node& next : graph.nodes) {
      if (next.name.starts_with(node.name + ".") && next.inputs == std::vector<std::string>{out} &&
          next.outputs.size() == 1) {
        out = next.outputs.front();
        advanced = true;
        break;
      }
    }
  }
  return out;
}

// Whether a pack hook sees `leaf` after all: a later checkpointable block reads it (a
// checkpointed layer saves its inputs, torch/utils/checkpoint.py), or a consumer keeps
// it beside the one SavedRef apply_input_require_grads gave it (a norm saving its
// input). A later block no checkpoint wraps reads it as any op does (Qwen2.5-VL's
// masked_scatter, after the vision tower, keeps only its mask).
bool saved_beyond_accumulate_grad(const graph::LayerGraph& graph, const graph::Node& embedding,
                                  const graph::Tensor& leaf) {
  for (const graph::Node& consumer : graph.nodes) {
    if (!reads(consumer, leaf.name)) continue;
    const bool checkpointable = graph.blocks[static_cast<size_t>(consumer.block)].checkpointable;
    if (consumer.block != embedding.block && checkpointable) return true;
    const auto refs = std::count_if(consumer.saves.begin(), consumer.saves.end(),
                                    [&](const graph::SavedRef& r) { return r.tensor == leaf.name; });
    if (refs != 1) return true;
  }
  return false;
}

}  // namespace

int apply_input_require_grads(graph::LayerGraph& graph) {
  std::unordered_map<std::string, bool> trainable;
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& p : node.params) {
      if (p.tied_to.empty()) trainable[p.name] = p.trainable;
    }
  }
  // gradient_checkpointing_enable calls it only when the model's main input is input_ids.
  if (graph.find_tensor(kInputIds) == nullptr) return 0;
  int marked = 0;
  for (const graph::Node& node : graph.nodes) {
    if (!is_input_embedding(graph, node) || trains_a_param(node, trainable)) continue;
    const std::string leaf = module_output(graph, node);
    for (graph::Tensor& tensor : graph.tensors) {
      if (tensor.name == leaf) tensor.requires_grad = true;
    }
    // The leaf's AccumulateGrad node holds it for as long as the graph reading it lives.
    for (graph::Node& consumer : graph.nodes) {
      if (reads(consumer, leaf)) consumer.saves.push_back(graph::SavedRef{leaf, graph::SaveWhen::kInputGrad});
    }
    ++marked;
  }
  return marked;
}

std::vector<int> input_grad_leaves(const graph::LayerGraph& graph) {
  std::vector<int> leaves;
  if (graph.find_tensor(kInputIds) == nullptr) return leaves;
  for (const graph::Node& node : graph.nodes) {
    if (!is_input_embedding(graph, node)) continue;
    const graph::Tensor* leaf = graph.find_tensor(module_output(graph, node));
    const bool trainable = std::any_of(node.params.begin(), node.params.end(),
                                       [](const graph::Param& p) { return p.tied_to.empty() && p.trainable; });
    if (leaf == nullptr || !leaf->requires_grad || trainable || saved_beyond_accumulate_grad(graph, node, *leaf)) {
      continue;
    }
    leaves.push_back(static_cast<int>(leaf - graph.tensors.data()));
  }
  return leaves;
}

void hold_input_grad_leaves(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis,
                            std::vector<std::vector<int>>& through_backward) {
  for (int t : input_grad_leaves(graph)) {
    const int producer = analysis.producer[static_cast<size_t>(t)];
    const int block = producer < 0 ? 0 : graph.nodes[static_cast<size_t>(producer)].block;
    if (block == 0) continue;  // no block runs backward after it
    through_backward.resize(graph.blocks.size());
    through_backward[static_cast<size_t>(block)].push_back(t);  // the leaf
    through_backward[static_cast<size_t>(block)].push_back(t);  // its `.grad`, of its size
  }
}

}  // namespace headroom::planner
