// DeepseekV2Moe / DeepseekV3MoE as transformers 5.23.0 runs them in training:
// the router in float32 (DeepseekV2TopkRouter / DeepseekV3TopkRouter), the
// routed experts through grouped_mm_experts_forward (integrations/moe.py,
// shared with the other MoE families: models/moe_parts.h), then the shared
// experts (an nn.Linear SwiGLU MLP) added to their sum.
#include "models/deepseek_moe.h"

#include "graph/op_traits.h"
#include "models/layers.h"
#include "models/moe.h"
#include "models/moe_loop.h"
#include "models/moe_parts.h"

namespace headroom::models {
namespace {

// F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32)):
// an f32 copy of x [T, H] (kept for dW) and of the weight [E, H] (kept for dX),
// f32 logits [T, E].
std::string router_logits(GraphBuilder& b, const DeepseekConfig& c, const std::string& p, const std::string& x) {
  const SizeExpr rows = tokens();
  const int64_t e = c.routed_experts;
  const std::string x32 = b.copy(p + ".x_f32", "cast", {x}, times(rows, c.hidden), DType::kF32);
  const std::string w32 =
      b.copy(p + ".weight_f32", "cast", {}, SizeExpr::constant(e * c.hidden), DType::kF32);
  OpSpec logits = moe_node(p, graph::op::kRouterLinear.data(), {x32, w32}, times(rows, e), DType::kF32,
                           {{x32, SaveWhen::kParamGrad}, {w32, SaveWhen::kInputGrad}});
  logits.params = {b.param(p + ".weight", {e, c.hidden})};
  logits.fwd_flops = logits.bwd_input_flops = logits.bwd_param_flops = times(rows, 2 * c.hidden * e);
  return b.op(logits);
}

// V2: softmax (keeps its f32 output); group_limited_greedy zeroes the scores
// outside the chosen groups (masked_fill keeps the bool mask); topk keeps its
// indices; times routed_scaling_factor (a Python float: nothing kept).
Routing v2_routing(GraphBuilder& b, const DeepseekConfig& c, const std::string& p, const std::string& logits) {
  const SizeExpr scores_elements = times(tokens(), c.routed_experts);
  const SizeExpr k_elements = times(tokens(), c.top_k);
  std::string scores = b.op(moe_node(p + ".softmax", "softmax", {logits}, scores_elements, DType::kF32,
                                     {{p + ".softmax", SaveWhen::kInputGrad}}));
  if (c.group_limited) {
    const std::string mask = b.copy(p + ".score_mask", "group_mask", {scores}, scores_elements, DType::kBool);
    scores = b.op(moe_node(p + ".masked_scores", "masked_fill", {scores, mask}, scores_elements, DType::kF32,
                           {{mask, SaveWhen::kInputGrad}}));
  }
  const std::string indices = b.copy(p + ".topk", "topk", {scores}, k_elements, DType::kInt64);
  const std::string values = b.op(moe_node(p + ".top_values", "gather", {scores, indices}, k_elements, DType::kF32,
                                           {{indices, SaveWhen::kInputGrad}}));
  return {b.copy(p + ".scaled", "mul_scalar", {values}, k_elements, DType::kF32), indices};
}

// V3: sigmoid (keeps its f32 output); the choice (scores + e_score_correction_bias,
// group top-2 sums, masked_fill) only yields indices, so nothing of it is kept;
// scores.gather keeps the indices; norm_topk_prob's in-place division keeps a
// clone of the values and the f32 sums; times routed_scaling_factor.
Routing v3_routing(GraphBuilder& b, const DeepseekConfig& c, const std::string& p, const std::string& logits) {
  const SizeExpr rows = tokens();
  const SizeExpr scores_elements = times(rows, c.routed_experts);
  const SizeExpr k_elements = times(rows, c.top_k);
  const std::string scores = b.op(moe_node(p + ".sigmoid", "sigmoid", {logits}, scores_elements, DType::kF32,
                                           {{p + ".sigmoid", SaveWhen::kInputGrad}}));
  const std::string choice = b.copy(p + ".scores_for_choice", "add", {scores}, scores_elements, DType::kF32);
  const std::string masked = b.copy(p + ".masked_choice", "masked_fill", {choice}, scores_elements, DType::kF32);
  const std::string indices = b.copy(p + ".topk", "topk", {masked}, k_elements, DType::kInt64);
  std::string weights = b.op(moe_node(p + ".top_values", "gather", {scores, indices}, k_elements, DType::kF32,
                                      {{indices, SaveWhen::kInputGrad}}));
  if (c.norm_topk) {
    const std::string sums = b.copy(p + ".top_sum", "sum", {weights}, rows, DType::kF32);
    const std::string original = b.copy(p + ".top_values_clone", "clone", {weights}, k_elements, DType::kF32);
    weights = b.op(moe_node(p + ".norm_topk", "div", {original, sums}, k_elements, DType::kF32,
                            {{original, SaveWhen::kInputGrad}, {sums, SaveWhen::kInputGrad}}));
  }
  return {b.copy(p + ".scaled", "mul_scalar", {weights}, k_elements, DType::kF32), indices};
}

}  // namespace

std::string add_deepseek_mlp(GraphBuilder& b, const std::string& p, const std::string& x, int64_t hidden,
                             int64_t width) {
  const SizeExpr rows = tokens();
  const std::string gate = b.linear(p + ".gate_proj", x, rows, hidden, width, false);
  const std::string up = b.linear(p + ".up_proj", x, rows, hidden, width, false);
  const std::string act = b.activation(p + ".act_fn", gate, times(rows, width), "silu");
  const std::string prod = b.mul(p + ".act_mul_up", act, up, times(rows, width));
  return b.linear(p + ".down_proj", prod, rows, width, hidden, false);
}

std::string add_deepseek_moe(GraphBuilder& b, const DeepseekConfig& c, const std::string& p, const std::string& x,
                             bool expert_modules) {
  const std::string logits = router_logits(b, c, p + ".gate", x);
  const Routing routing = c.v3 ? v3_routing(b, c, p + ".gate", logits) : v2_routing(b, c, p + ".gate", logits);
  // The routing weights stay float32 into the experts, as Mixtral's do.
  MoeSpec m;
  m.experts = c.routed_experts;
  m.top_k = c.top_k;
  m.expert_intermediate = c.moe_intermediate;
  m.f32_routing_weights = true;
  std::string routed;
  if (!expert_modules) {
    routed = add_routed_experts(b, m, c.hidden, p, x, routing);
  } else if (c.v3) {
    // DeepseekV3MoE.moe, 4.57.6: the weights, the weighted outputs and the accumulator
    // (zeros_like(x, dtype=topk_weights.dtype)) take the routing weights' dtype, the
    // compute dtype under the Trainer's autocast (the oracle: mul [n, H] bf16 per expert).
    MoeSpec loop = m;
    loop.f32_routing_weights = false;
    routed = add_expert_loop(b, loop, c.hidden, p, x, routing);
  } else {
    routed = add_deepseek_v2_expert_loop(b, c, p, x, routing);
  }
  const std::string shared = add_deepseek_mlp(b, p + ".shared_experts", x, c.hidden,
                                              c.moe_intermediate * c.shared_experts);
  return b.add(p + ".add_shared", routed, shared, times(tokens(), c.hidden));
}

}  // namespace headroom::models
