#include "planner/mechanisms/litgpt_model.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <string>
#include <vector>

#include "graph/op_traits.h"
#include "planner/mechanisms/trainability.h"

namespace headroom::planner {

void untie_output_head(graph::LayerGraph& graph) {
  for (graph::Node& node : graph.nodes) {
    if (node.op != graph::op::kLinear) continue;
    for (graph::Param& param : node.params) param.tied_to.clear();
  }
}

namespace {

// The linear that writes the logits `loss` reads, or null.
const graph::Node* head_of(const graph::LayerGraph& graph, const graph::Node& loss) {
  if (loss.inputs.empty()) return nullptr;
  const int producer = graph.producer_of(loss.inputs.front());
  if (producer < 0 || graph.nodes[producer].op != graph::op::kLinear) return nullptr;
  return &graph.nodes[producer];
}

bool weight_trains(const graph::Node& head) {
  for (const graph::Param& param : head.params) {
    if (param.name == head.name + ".weight") return param.trainable;
  }
  return false;
}

bool has_adapters(const graph::Node& node) {
  return std::any_of(node.params.begin(), node.params.end(),
                     [&](const graph::Param& param) { return param.name == node.name + ".lora_A.weight"; });
}

// The attention a q/k/v projection belongs to ("model.layers.3.self_attn"), or "".
std::string qkv_attention(const std::string& name) {
  for (const char* part : {".q_proj", ".k_proj", ".v_proj"}) {
    if (name.ends_with(part)) return name.substr(0, name.size() - std::string_view(part).size());
  }
  return "";
}

// Removes an adapted linear's own lora dropout (trainability.cc add_lora's
// "<node>.lora_dropout_out" and "_mask"): another part's dropout serves it.
void drop_own_dropout(graph::LayerGraph& graph, graph::Node& node) {
  const std::string out = node.name + ".lora_dropout_out";
  const std::string mask = node.name + ".lora_dropout_mask";
  const auto is_dropout = [&](const std::string& name) { return name == out || name == mask; };
  std::erase_if(node.outputs, is_dropout);
  std::erase_if(node.saves, [&](const graph::SavedRef& saved) { return is_dropout(saved.tensor); });
  std::erase_if(graph.tensors, [&](const graph::Tensor& tensor) { return is_dropout(tensor.name); });
}

}  // namespace

void fuse_qkv_adapters(graph::LayerGraph& graph) {
  std::map<std::string, std::vector<size_t>> parts;  // attention -> its adapted projections
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const graph::Node& node = graph.nodes[n];
    const std::string attention = qkv_attention(node.name);
    if (!attention.empty() && node.linear && has_adapters(node)) parts[attention].push_back(n);
  }
  for (const auto& [attention, adapted] : parts) {
    for (size_t i = 1; i < adapted.size(); ++i) drop_own_dropout(graph, graph.nodes[adapted[i]]);
    if (adapted.size() == 3) continue;  // zero_pad returns x itself: nothing saved
    int64_t width = 0;
    for (size_t n : adapted) width += graph.nodes[n].linear->out_features;
    graph::Node& first = graph.nodes[adapted.front()];
    const std::string padded = attention + ".lora_qkv_out";
    graph.tensors.push_back(graph::Tensor{padded, first.linear->rows.scaled(width), std::nullopt, false});
    first.outputs.push_back(padded);
    first.saves.push_back({padded, graph::SaveWhen::kParamGrad});
  }
}

void copy_merged_heads(graph::LayerGraph& graph) {
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (graph.nodes[n].op != graph::op::kAttention || graph.nodes[n].outputs.empty()) continue;
    const std::string out = graph.nodes[n].outputs.front();
    const graph::Tensor* produced = graph.find_tensor(out);
    if (produced == nullptr) continue;
    const std::string name = out.substr(0, out.rfind('.')) + ".merge_heads";
    graph::Tensor merged{name, produced->elements, produced->dtype, false};
    for (graph::Node& reader : graph.nodes) {
      std::replace(reader.inputs.begin(), reader.inputs.end(), out, name);
      for (graph::SavedRef& saved : reader.saves) {
        if (saved.tensor == out && &reader != &graph.nodes[n]) saved.tensor = name;
      }
    }
    graph::Node copy;
    copy.name = name;
    copy.op = "transpose_contiguous";
    copy.block = graph.nodes[n].block;
    copy.inputs = {out};
    copy.outputs = {name};
    copy.fwd_io_elements = merged.elements.scaled(2);
    graph.tensors.push_back(merged);
    graph.nodes.insert(graph.nodes.begin() + static_cast<std::ptrdiff_t>(n) + 1, std::move(copy));
    ++n;
  }
}

namespace {

// The cast autocast put in front of `node` ("<node>.cast:<input>"), or "".
std::string own_cast(const graph::Node& node) {
  if (node.inputs.empty() || !node.inputs.front().starts_with(node.name + ".cast:")) return "";
  return node.inputs.front();
}

// `node` reads and keeps `shared` in place of its own cast `own`; `own` goes.
void read_shared_cast(graph::LayerGraph& graph, graph::Node& node, const std::string& own, const std::string& shared) {
  std::replace(node.inputs.begin(), node.inputs.end(), own, shared);
  for (graph::SavedRef& saved : node.saves) {
    if (saved.tensor == own) saved.tensor = shared;
  }
  // `node` is not looked at again: erasing the cast may move it.
  std::erase_if(graph.nodes, [&](const graph::Node& cast) { return cast.name == own; });
  std::erase_if(graph.tensors, [&](const graph::Tensor& tensor) { return tensor.name == own; });
}

}  // namespace

void share_qkv_input_cast(graph::LayerGraph& graph) {
  std::map<std::string, std::vector<std::string>> parts;  // attention -> its q, k, v projections
  for (const graph::Node& node : graph.nodes) {
    const std::string attention = qkv_attention(node.name);
    if (!attention.empty() && node.linear && !has_adapters(node) && !own_cast(node).empty()) {
      parts[attention].push_back(node.name);
    }
  }
  for (const auto& [attention, names] : parts) {
    if (names.size() != 3) continue;
    std::string shared, source;
    for (const std::string& name : names) {
      const auto node = std::find_if(graph.nodes.begin(), graph.nodes.end(),
                                     [&](const graph::Node& n) { return n.name == name; });
      const std::string own = own_cast(*node);
      const int producer = graph.producer_of(own);
      const std::string from = producer < 0 ? "" : graph.nodes[producer].inputs.front();
      if (shared.empty()) {
        shared = own;
        source = from;
      } else if (from == source) {
        read_shared_cast(graph, *node, own, shared);
      }
    }
  }
}

void cast_head_per_chunk(graph::LayerGraph& graph) {
  std::vector<std::string> casts;
  for (const graph::Node& node : graph.nodes) {
    if (node.op != graph::op::kLoss) continue;
    const graph::Node* head = head_of(graph, node);
    if (head != nullptr && !weight_trains(*head)) casts.push_back(head->name + ".weight_cast");
  }
  for (const std::string& name : casts) {
    const auto copy = std::find_if(graph.tensors.begin(), graph.tensors.end(),
                                   [&](const graph::Tensor& tensor) { return tensor.name == name; });
    const int producer = graph.producer_of(name);
    if (copy == graph.tensors.end() || producer < 0) continue;
    // One copy of V x H per chunk: S / 128 copies, as a coefficient of S.
    const int64_t per_copy = copy->elements.c;
    copy->elements = graph::SizeExpr{0, 0, per_copy, 0, 0, 0}.divided_up(kLitgptHeadChunkTokens);
    graph.nodes[producer].fwd_io_elements = copy->elements;
  }
}

namespace {

constexpr std::string_view kKeptGradSuffix = ".weight_grad_kept";

bool is_nf4(const graph::Node& node) {
  return std::any_of(node.params.begin(), node.params.end(), [&](const graph::Param& param) {
    return param.name == node.name + ".weight" && param.dtype == graph::DType::kNF4;
  });
}

// The StableEmbedding swap: the old weight the optimizer holds and the new
// weight's gradient nothing zeroes, both V x H in the embedding's dtype.
void keep_replaced_embedding(graph::Node& node) {
  const auto weight = std::find_if(node.params.begin(), node.params.end(),
                                   [&](const graph::Param& param) { return param.name == node.name + ".weight"; });
  if (weight == node.params.end()) return;
  graph::Param replaced = *weight;
  replaced.trainable = false;
  replaced.tied_to.clear();
  graph::Param grad = replaced;
  replaced.name = node.name + ".replaced_weight";
  grad.name = node.name + std::string(kKeptGradSuffix);
  node.params.push_back(replaced);
  node.params.push_back(grad);
}

}  // namespace

void litgpt_qlora(graph::LayerGraph& graph, bool double_quant) {
  std::vector<std::string> heads;
  for (const graph::Node& node : graph.nodes) {
    if (node.op != graph::op::kLoss) continue;
    const graph::Node* head = head_of(graph, node);
    if (head != nullptr) heads.push_back(head->name);
  }
  for (graph::Node& node : graph.nodes) {
    const bool is_head = std::find(heads.begin(), heads.end(), node.name) != heads.end();
    if (is_head && node.linear && !is_nf4(node)) quantize_linear(node, double_quant);
    if (node.op == graph::op::kLinear && node.linear && is_nf4(node)) {
      const int64_t weight = node.linear->in_features * node.linear->out_features;
      node.bwd_workspace_elements = graph::SizeExpr::constant(2 * weight);
    }
    if (node.op == graph::op::kEmbedding && node.name.ends_with("embed_tokens")) keep_replaced_embedding(node);
  }
}

bool kept_gradient(const graph::Param& param) {
  return !param.trainable && param.name.ends_with(kKeptGradSuffix);
}

bool litgpt_paged_adamw(const RunSettings& settings) {
  return settings.stack == Stack::kLitgpt && settings.mode == TrainMode::kQlora &&
         settings.optimizer == OptimizerKind::kAdamW;
}

}  // namespace headroom::planner
