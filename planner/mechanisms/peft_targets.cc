#include "planner/mechanisms/peft_targets.h"

#include <algorithm>
#include <array>
#include <set>

#include "graph/op_traits.h"
#include "planner/mechanisms/reward_head.h"

namespace headroom::planner {
namespace {

// The causal-LM cross-entropy (models/graph_builder.cc lm_loss writes NAME:log_probs).
bool reads_lm_logits(const graph::Node& loss) {
  return std::any_of(loss.outputs.begin(), loss.outputs.end(),
                     [](const std::string& out) { return out.ends_with(":log_probs"); });
}

// The linear a loss reads through elementwise steps (an upcast, a soft-cap), or -1.
int head_linear_of(const graph::LayerGraph& graph, const graph::Node& loss) {
  const graph::Node* at = &loss;
  for (size_t hops = 0; hops < graph.nodes.size() && !at->inputs.empty(); ++hops) {
    const int producer = graph.producer_of(at->inputs.front());
    if (producer < 0) return -1;
    at = &graph.nodes[static_cast<size_t>(producer)];
    if (at->linear) return producer;
  }
  return -1;
}

// PEFT leaves out the output embedding (get_output_embeddings) and a SEQ_CLS head.
std::set<int> excluded_heads(const graph::LayerGraph& graph) {
  std::set<int> heads;
  for (const graph::Node& node : graph.nodes) {
    if (node.op != "loss") continue;
    const int head = head_linear_of(graph, node);
    if (head < 0) continue;
    if (reads_lm_logits(node) || graph.nodes[static_cast<size_t>(head)].name == kRewardHead) heads.insert(head);
  }
  return heads;
}

}  // namespace

std::vector<std::string> all_linear_modules(const graph::LayerGraph& graph) {
  const std::set<int> heads = excluded_heads(graph);
  std::vector<std::string> names;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const graph::Node& node = graph.nodes[n];
    if (node.op == graph::op::kLinear && node.linear && !heads.contains(static_cast<int>(n))) {
      names.push_back(node.name);
    }
  }
  return names;
}

namespace {

struct MoeParameterTargets {
  const char* family;
  std::array<const char*, 4> names;  // the transformers 4.x module names PEFT converts
};
constexpr MoeParameterTargets kMoeParameterTargets[] = {
    {"mixtral", {"gate", "w1", "w2", "w3"}},
    {"deepseek_v2", {"gate", "gate_proj", "up_proj", "down_proj"}},
    {"deepseek_v3", {"gate", "gate_proj", "up_proj", "down_proj"}},
    {"qwen3_moe", {"gate", "gate_proj", "up_proj", "down_proj"}},
    {"olmoe", {"gate", "gate_proj", "up_proj", "down_proj"}},
};

}  // namespace

Status refuse_moe_parameter_targets(const graph::LayerGraph& graph, const std::vector<std::string>& targets,
                                    const std::string& model) {
  const auto row = std::find_if(std::begin(kMoeParameterTargets), std::end(kMoeParameterTargets),
                                [&](const MoeParameterTargets& r) { return graph.family == r.family; });
  if (row == std::end(kMoeParameterTargets)) return Status::ok();
  std::string named = is_all_linear(targets) ? std::string(kAllLinear) : "";
  for (const std::string& target : targets) {
    if (named.empty() && std::find_if(row->names.begin(), row->names.end(), [&](const char* n) {
                           return target == n;
                         }) != row->names.end()) {
      named = target;
    }
  }
  if (named.empty()) return Status::ok();
  return Status::unsupported(
      model + ": lora.targets: on a " + graph.family + " model PEFT turns '" + named +
      "' into LoRA on the fused experts' and the router's weights (lora.ParamWrapper, target_parameters; "
      "peft/utils/transformers_weight_conversion.py), which headroom does not price; target the attention "
      "projections (q_proj,k_proj,v_proj,o_proj)");
}

}  // namespace headroom::planner
