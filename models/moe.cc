// The MoE block as transformers 5.23.0 runs it in training: the TopKRouter
// (models/<family>/modeling_<family>.py), then the experts through
// grouped_mm_experts_forward (integrations/moe.py), the default experts
// implementation (modeling_utils.py get_correct_experts_implementation:
// "grouped_mm" unless asked otherwise). What each node keeps was checked on the
// meta-device oracle (bench/oracle, qwen3-moe runs): docs/models.md.
#include "models/moe.h"

#include "models/moe_parts.h"
#include "models/moe_loop.h"

#include <optional>
#include <utility>
#include <vector>

#include "graph/op_traits.h"
#include "models/layers.h"

namespace headroom::models {

OpSpec moe_node(const std::string& name, const char* op, std::vector<std::string> inputs, SizeExpr out,
                std::optional<DType> dtype, std::vector<SavedRef> saves) {
  OpSpec spec;
  spec.name = name;
  spec.op = op;
  spec.inputs = std::move(inputs);
  spec.out_elements = out;
  spec.out_dtype = dtype;
  spec.saves = std::move(saves);
  return spec;
}

namespace {

OpSpec node(const std::string& name, const char* op, std::vector<std::string> inputs, SizeExpr out,
            std::optional<DType> dtype, std::vector<SavedRef> saves) {
  return moe_node(name, op, std::move(inputs), out, dtype, std::move(saves));
}

}  // namespace

// TopKRouter.forward: logits = F.linear(x, weight) (an nn.Parameter, not an
// nn.Linear: neither PEFT nor bitsandbytes wraps it); softmax in float32
// (dtype=torch.float, Mixtral: logits.float()); topk; optionally renormalized
// in place (div_ keeps a clone of the values and the f32 sums); cast back to the
// logits' dtype except in Mixtral.
// Before 5.0 the gate is an nn.Linear (MixtralSparseMoeBlock.gate, 4.44.2).

Routing add_router(GraphBuilder& b, const MoeSpec& m, int64_t hidden, const std::string& p,
                   const std::string& x, bool linear_gate) {
  const SizeExpr rows = tokens();
  const SizeExpr k_elements = times(rows, m.top_k);
  std::string logits;
  if (linear_gate) {
    logits = b.linear(p + ".gate", x, rows, hidden, m.experts, false);
  } else {
    OpSpec router = node(p + ".gate", graph::op::kRouterLinear.data(), {x}, times(rows, m.experts), std::nullopt,
                         {{x, SaveWhen::kParamGrad}});
    router.params = {b.param(p + ".gate.weight", {m.experts, hidden})};
    router.fwd_flops = router.bwd_input_flops = router.bwd_param_flops = times(rows, 2 * hidden * m.experts);
    logits = b.op(router);
  }
  const std::string probs = b.op(node(p + ".gate.softmax", "softmax", {logits}, times(rows, m.experts), DType::kF32,
                                       {{p + ".gate.softmax", SaveWhen::kInputGrad}}));
  const std::string indices =
      b.copy(p + ".gate.topk", "topk", {probs}, k_elements, DType::kInt64);
  // TopkBackward0 keeps the indices to scatter the gradient back.
  std::string weights = b.op(node(p + ".gate.top_values", "gather", {probs, indices}, k_elements, DType::kF32,
                                  {{indices, SaveWhen::kInputGrad}}));
  if (m.norm_topk) {
    const std::string sums = b.copy(p + ".gate.top_sum", "sum", {weights}, rows, DType::kF32);
    const std::string original = b.copy(p + ".gate.top_values_clone", "clone", {weights}, k_elements, DType::kF32);
    weights = b.op(node(p + ".gate.norm_topk", "div", {original, sums}, k_elements, DType::kF32,
                        {{original, SaveWhen::kInputGrad}, {sums, SaveWhen::kInputGrad}}));
  }
  if (!m.f32_routing_weights) weights = b.copy(p + ".gate.weights_cast", "cast", {weights}, k_elements);
  return {weights, indices};
}

namespace {

// One grouped GEMM over all experts' 3-D weight [E, out, in]: the routed rows,
// sorted by expert, at `offsets`. Keeps its input for dW (the weight's gradient
// is the only use of it: a frozen expert keeps nothing) and the int32 offsets.
std::string grouped_mm(GraphBuilder& b, const std::string& name, const std::string& x,
                       const std::string& offsets, Param weight, SizeExpr routed, int64_t in, int64_t out) {
  const SizeExpr flops = routed.scaled(2 * in * out);
  OpSpec spec = node(name, graph::op::kGroupedMm.data(), {x, offsets}, routed.scaled(out), std::nullopt,
                     {{x, SaveWhen::kParamGrad}, {offsets, SaveWhen::kAnyGrad}});
  spec.params = {std::move(weight)};
  spec.fwd_flops = spec.bwd_input_flops = spec.bwd_param_flops = flops;
  return b.op(spec);
}

}  // namespace

// grouped_mm_experts_forward: sort the T*k (token, expert) pairs by expert,
// gather their rows (index keeps perm // k), gate_up grouped GEMM, chunk,
// act(gate) * up, down grouped GEMM, times the routing weights (kept: both),
// back to token order (index keeps inv_perm), sum over k.
std::string add_routed_experts(GraphBuilder& b, const MoeSpec& m, int64_t hidden, const std::string& p,
                               const std::string& x, const Routing& routing) {
  const std::string e = p + ".experts";
  const SizeExpr routed = tokens().scaled(m.top_k);  // S = T * k, however the tokens are routed
  const int64_t width = m.expert_intermediate;
  const std::string perm = b.copy(e + ".sort", "sort", {routing.indices}, routed, DType::kInt64);
  const std::string token_of = b.copy(e + ".token_index", "floor_divide", {perm}, routed, DType::kInt64);
  const std::string inv_perm = b.copy(e + ".inv_perm", "index_put", {perm}, routed, DType::kInt64);
  const std::string offsets =
      b.copy(e + ".offsets", "cumsum", {perm}, SizeExpr::constant(m.experts), DType::kInt32);
  const std::string rows = b.op(node(e + ".gather", "index", {x, token_of}, routed.scaled(hidden), std::nullopt,
                                     {{token_of, SaveWhen::kInputGrad}}));
  const std::optional<DType> weight_dtype = m.f32_routing_weights ? std::optional(DType::kF32) : std::nullopt;
  const std::string scale = b.op(node(e + ".weights_sorted", "index", {routing.weights, perm}, routed, weight_dtype,
                                      {{perm, SaveWhen::kInputGrad}}));
  const std::string gate_up = grouped_mm(b, e + ".gate_up_proj", rows, offsets,
                                         b.param(e + ".gate_up_proj", {m.experts, 2 * width, hidden}), routed,
                                         hidden, 2 * width);
  const auto parts = b.split(e + ".chunk", gate_up, {{e + ".gate", routed.scaled(width)}, {e + ".up", routed.scaled(width)}});
  const std::string act = b.activation(e + ".act_fn", parts[0], routed.scaled(width), "silu");
  const std::string prod = b.mul(e + ".act_mul_up", act, parts[1], routed.scaled(width));
  const std::string down = grouped_mm(b, e + ".down_proj", prod, offsets,
                                      b.param(e + ".down_proj", {m.experts, hidden, width}), routed, width, hidden);
  // Mixtral's float32 weights promote the product (and what follows) to float32.
  const std::optional<DType> out_dtype = weight_dtype;
  const std::string weighted = b.op(node(e + ".weighted", "mul", {down, scale}, routed.scaled(hidden), out_dtype,
                                         {{down, SaveWhen::kInputGrad}, {scale, SaveWhen::kInputGrad}}));
  const std::string unsorted = b.op(node(e + ".unsort", "index", {weighted, inv_perm}, routed.scaled(hidden),
                                         out_dtype, {{inv_perm, SaveWhen::kInputGrad}}));
  const std::string summed = b.copy(e + ".sum_top_k", "sum", {unsorted}, times(tokens(), hidden), out_dtype);
  if (!m.f32_routing_weights) return summed;
  return b.copy(e + ".to_hidden_dtype", "cast", {summed}, times(tokens(), hidden));
}

// Qwen2MoeSparseMoeBlock's shared expert: a dense SwiGLU MLP (nn.Linear: PEFT
// and bitsandbytes wrap these) scaled by sigmoid(shared_expert_gate(x)).
std::string add_shared_expert(GraphBuilder& b, const MoeSpec& m, int64_t hidden, const std::string& p,
                              const std::string& x) {
  const SizeExpr rows = tokens();
  const int64_t width = m.shared_intermediate;
  const std::string s = p + ".shared_expert";
  const std::string gate = b.linear(s + ".gate_proj", x, rows, hidden, width, false);
  const std::string up = b.linear(s + ".up_proj", x, rows, hidden, width, false);
  const std::string act = b.activation(s + ".act_fn", gate, times(rows, width), "silu");
  const std::string prod = b.mul(s + ".act_mul_up", act, up, times(rows, width));
  const std::string out = b.linear(s + ".down_proj", prod, rows, width, hidden, false);
  const std::string logit = b.linear(p + ".shared_expert_gate", x, rows, hidden, 1, false);
  // sigmoid keeps its output for its backward.
  const std::string sig = b.op(node(p + ".shared_expert_sigmoid", "sigmoid", {logit}, rows, std::nullopt,
                                    {{p + ".shared_expert_sigmoid", SaveWhen::kInputGrad}}));
  return b.mul(p + ".shared_expert_scaled", sig, out, times(rows, hidden));
}

std::string add_moe_block(GraphBuilder& b, const MoeSpec& m, int64_t hidden, const std::string& p,
                          const std::string& x) {
  if (m.expert_modules) return add_expert_loop_block(b, m, hidden, p, x);
  // Qwen2-MoE computes the shared expert first (Qwen2MoeSparseMoeBlock.forward).
  const std::string shared = m.shared_intermediate > 0 ? add_shared_expert(b, m, hidden, p, x) : "";
  const Routing routing = add_router(b, m, hidden, p, x, false);
  const std::string routed = add_routed_experts(b, m, hidden, p, x, routing);
  if (shared.empty()) return routed;
  return b.add(p + ".add_shared", routed, shared, times(tokens(), hidden));
}

int64_t inactive_expert_parameters(const graph::LayerGraph& graph, const MoeSpec& moe) {
  if (moe.experts == 0) return 0;
  int64_t experts = 0;
  for (const graph::Node& node : graph.nodes) {
    if (node.op != graph::op::kGroupedMm && !is_expert_linear(node.name)) continue;
    for (const Param& param : node.params) experts += param.elements();
  }
  return experts / moe.experts * (moe.experts - moe.top_k);
}

}  // namespace headroom::models
