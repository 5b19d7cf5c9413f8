#include "planner/mechanisms/unsloth_model.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "graph/op_traits.h"
#include "planner/mechanisms/graph_edits.h"
#include "planner/mechanisms/litgpt_model.h"

namespace headroom::planner {
namespace {

bool has_param(const graph::Node& node, std::string_view suffix) {
  return std::any_of(node.params.begin(), node.params.end(),
                     [&](const graph::Param& param) { return param.name == node.name + std::string(suffix); });
}

// An adapted, bias-free linear without lora dropout: what patch_peft_model fuses.
bool fusable(const graph::Node* node) {
  if (node == nullptr || !node->linear || !has_param(*node, ".lora_A.weight") || has_param(*node, ".bias")) {
    return false;
  }
  return std::none_of(node->outputs.begin(), node->outputs.end(),
                      [&](const std::string& out) { return out == node->name + ".lora_dropout_out"; });
}

bool is_nf4(const graph::Node& node) {
  return std::any_of(node.params.begin(), node.params.end(), [&](const graph::Param& param) {
    return param.name == node.name + ".weight" && param.dtype == graph::DType::kNF4;
  });
}

// The fused Function keeps no X @ A; a 4-bit base is dequantized into the global
// buffer in forward and, unless `backward_in_buffer`, into a fresh copy in backward.
void fuse_projection(graph::Node& node, bool backward_in_buffer, int64_t& largest_weight) {
  drop_save(node, node.name + ".lora_mid");
  if (!is_nf4(node)) return;
  const int64_t weight = node.linear->in_features * node.linear->out_features;
  largest_weight = std::max(largest_weight, weight);
  node.workspace_elements = graph::SizeExpr{};
  node.bwd_workspace_elements = backward_in_buffer ? graph::SizeExpr{} : graph::SizeExpr::constant(weight);
}

struct FusedCount {
  int projections = 0;
  int64_t largest_weight = 0;
  std::string first;  // the first fused linear, which holds the global buffer
};

void note(FusedCount& count, const graph::Node& node) {
  if (count.first.empty()) count.first = node.name;
  ++count.projections;
}

// LoRA_MLP: X (kept by gate_proj and up_proj), e (kept by act_fn) and g (kept by the
// multiply); the multiply no longer keeps silu(e), down_proj no longer keeps h.
void fuse_mlp(graph::LayerGraph& graph, const std::string& mlp, FusedCount& count) {
  graph::Node* gate = node_named(graph, mlp + ".gate_proj");
  graph::Node* up = node_named(graph, mlp + ".up_proj");
  graph::Node* down = node_named(graph, mlp + ".down_proj");
  graph::Node* act = node_named(graph, mlp + ".act_fn");
  graph::Node* product = node_named(graph, mlp + ".act_mul_up");
  if (!fusable(gate) || !fusable(up) || !fusable(down) || act == nullptr || product == nullptr) return;
  drop_save(*product, act->outputs.front());
  drop_save(*down, product->outputs.front());
  for (graph::Node* node : {gate, up}) {
    fuse_projection(*node, false, count.largest_weight);
    note(count, *node);
  }
  fuse_projection(*down, true, count.largest_weight);  // matmul_lora(dY, downW.t(), ...)
  note(count, *down);
}

// LoRA_QKV (all three adapted, bias-free) and LoRA_W (o_proj): X and the adapters.
void fuse_attention_projections(graph::LayerGraph& graph, const std::string& attention, FusedCount& count) {
  std::vector<graph::Node*> qkv;
  for (const char* part : {".q_proj", ".k_proj", ".v_proj"}) qkv.push_back(node_named(graph, attention + part));
  if (std::all_of(qkv.begin(), qkv.end(), fusable)) {
    for (graph::Node* node : qkv) {
      fuse_projection(*node, false, count.largest_weight);
      note(count, *node);
    }
  }
  graph::Node* o = node_named(graph, attention + ".o_proj");
  if (fusable(o)) {
    fuse_projection(*o, false, count.largest_weight);
    note(count, *o);
  }
}

// The module a node belongs to: "model.layers.3.mlp" for "model.layers.3.mlp.gate_proj".
std::string parent_of(const std::string& name, std::string_view leaf) {
  return name.ends_with(leaf) ? name.substr(0, name.size() - leaf.size()) : "";
}

}  // namespace

int unsloth_fused_norms(graph::LayerGraph& graph) {
  int rewritten = 0;
  for (graph::Node& node : graph.nodes) {
    const std::string x32 = node.name + ":x32";
    const std::string normalized = node.name + ":normalized";
    if (node.op != graph::op::kNorm || node.inputs.empty()) continue;
    if (std::find(node.outputs.begin(), node.outputs.end(), x32) == node.outputs.end()) continue;
    const auto python_only = [&](const std::string& name) { return name == x32 || name == normalized; };
    std::erase_if(node.outputs, python_only);
    std::erase_if(graph.tensors, [&](const graph::Tensor& tensor) { return python_only(tensor.name); });
    node.saves = {graph::SavedRef{node.inputs.front(), graph::SaveWhen::kAnyGrad},
                  graph::SavedRef{node.name + ":rstd", graph::SaveWhen::kAnyGrad}};
    // One kernel: x read, y written, r written.
    const graph::Tensor* y = graph.find_tensor(node.outputs.front());
    if (y != nullptr) node.fwd_io_elements = y->elements.scaled(2) + graph.find_tensor(node.name + ":rstd")->elements;
    node.fwd_io_f32_elements = graph::SizeExpr{};
    ++rewritten;
  }
  return rewritten;
}

int unsloth_fused_lora(graph::LayerGraph& graph) {
  std::vector<std::string> mlps, attentions;
  for (const graph::Node& node : graph.nodes) {
    if (const std::string mlp = parent_of(node.name, ".gate_proj"); !mlp.empty()) mlps.push_back(mlp);
    if (const std::string attention = parent_of(node.name, ".q_proj"); !attention.empty()) {
      attentions.push_back(attention);
    }
  }
  FusedCount count;
  for (const std::string& mlp : mlps) fuse_mlp(graph, mlp, count);
  for (const std::string& attention : attentions) fuse_attention_projections(graph, attention, count);
  graph::Node* holder = count.first.empty() ? nullptr : node_named(graph, count.first);
  if (holder != nullptr && count.largest_weight > 0) {
    constexpr int64_t kAbsmaxBlock = 64;  // one fp32 absmax per 64 weights, dequantized
    holder->params.push_back(
        graph::Param{"unsloth.weight_buffer", {count.largest_weight}, graph::DType::kBF16, false, ""});
    holder->params.push_back(graph::Param{"unsloth.absmax_buffer", {count.largest_weight / kAbsmaxBlock},
                                          graph::DType::kF32, false, ""});
  }
  return count.projections;
}

void unsloth_attention_top(graph::LayerGraph& graph) {
  std::vector<size_t> attentions;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (graph.nodes[n].op == graph::op::kAttention && graph.nodes[n].inputs.size() >= 3) attentions.push_back(n);
  }
  if (attentions.empty()) return;
  const graph::Node& first = graph.nodes[attentions.front()];
  const graph::Tensor* q = graph.find_tensor(first.inputs[0]);
  const graph::Tensor* k = graph.find_tensor(first.inputs[1]);
  if (q == nullptr || k == nullptr) return;
  // Per token: xformers keeps K and V at q's width where SDPA keeps them grouped, SDPA
  // keeps a copy of the q-wide output where xformers keeps its view.
  const int64_t q_width = q->elements.bs;
  const int64_t kv_width = k->elements.bs;
  if (2 * (q_width - kv_width) <= q_width) {
    copy_merged_heads(graph);
    return;
  }
  for (size_t n : attentions) {
    graph::Node& node = graph.nodes[n];
    const graph::SizeExpr expanded = graph.find_tensor(node.inputs[0])->elements;
    for (int part = 1; part <= 2; ++part) {
      const std::string name = node.name + (part == 1 ? ".xformers_k" : ".xformers_v");
      drop_save(node, node.inputs[part]);
      graph.tensors.push_back(graph::Tensor{name, expanded, std::nullopt, false});
      node.outputs.push_back(name);
      node.saves.push_back({name, graph::SaveWhen::kInputGrad});
      node.fwd_io_elements += expanded.scaled(2);
    }
  }
}

int64_t unsloth_ce_chunks(int64_t tokens, int64_t vocab) {
  // exact = tokens * vocab * 4 bytes / 4 GiB; one chunk when that is at most 1, else
  // rounded up to a multiple of 4 (get_chunk_size).
  constexpr int64_t kTargetBytes = int64_t{4} << 30;
  const int64_t logits_bytes = tokens * vocab * 4;
  if (logits_bytes <= kTargetBytes) return 1;
  const int64_t exact = (logits_bytes + kTargetBytes - 1) / kTargetBytes;
  return (exact + 3) / 4 * 4;
}

void unsloth_fused_ce_chunks(graph::LayerGraph& graph, int64_t tokens, int64_t bytes_per_logit) {
  for (graph::Node& head : graph.nodes) {
    if (head.op != graph::op::kFusedLinearCe) continue;
    const graph::Param& weight = head.params.front();
    const int64_t vocab = weight.shape.front();
    const int64_t chunks = unsloth_ce_chunks(tokens, vocab);
    const int64_t rows = (tokens + chunks - 1) / chunks;  // torch.chunk: ceil(tokens / chunks)
    // Workspace counts 16-bit elements; the fp32 loss per row beside them.
    head.workspace_elements = graph::SizeExpr::constant(rows * vocab * bytes_per_logit / 2 + 2 * rows);
  }
}

}  // namespace headroom::planner
