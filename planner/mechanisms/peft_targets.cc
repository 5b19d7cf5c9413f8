#include "planner/mechanisms/peft_targets.h"

#include <algorithm>
#include <array>
#include <set>

#include "graph/op_traits.h"
#include "planner/mechanisms/reward_head.h"

namespace headroom::planner {
namespace {

// PEFT leaves out the output embedding (get_output_embeddings) and a SEQ_CLS head.
std::set<int> excluded_heads(const graph::LayerGraph& graph) {
  std::set<int> heads;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const graph::Node& node = graph.nodes[n];
    if (node.op != "loss") continue;
    const int head = loss_head_linear(graph, static_cast<int>(n));
    if (head < 0) continue;
    if (is_lm_loss(node) || graph.nodes[static_cast<size_t>(head)].name == kRewardHead) heads.insert(head);
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
