// MixtralSparseMoeBlock.forward, transformers 4.44.2 (models/mixtral/
// modeling_mixtral.py), and Qwen2MoeSparseMoeBlock.forward (models/qwen2_moe/
// modeling_qwen2_moe.py), as autograd keeps them:
//   logits = gate(x); softmax(dtype=float); topk; (renormalize in place); .to(x.dtype)
//   final = zeros(T, hidden); mask = one_hot(selected, E).permute(2, 1, 0)
//   for each expert j: idx, top_x = torch.where(mask[j])    (nonzero: [n, 2] int64)
//     h = x[None, top_x]                                   (IndexBackward keeps top_x)
//     y = w2(act(w1(h)) * w3(h)) * weights[top_x, idx, None] (mul keeps both)
//     final.index_add_(0, top_x, y)                        (keeps top_x and y)
// Qwen2-MoE then adds sigmoid(shared_expert_gate(x)) * shared_expert(x).
#include "models/moe_loop.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <vector>

#include "graph/op_traits.h"
#include "models/layers.h"

namespace headroom::models {
namespace {

struct ExpertNames {
  const char* gate;
  const char* up;
  const char* down;
};

// MixtralBlockSparseTop2MLP: w1 (gate), w3 (up), w2 (down); Qwen2MoeMLP (and
// Qwen3-MoE's, OLMoE's): gate_proj, up_proj, down_proj.
ExpertNames expert_names(const MoeSpec& m) {
  if (m.mixtral_names) return {"w1", "w3", "w2"};
  return {"gate_proj", "up_proj", "down_proj"};
}

// What one expert's step of the loop hands the next: the block's output so far and
// the routed copy of x the Python local `current_state` still holds.
struct ExpertStep {
  std::string accumulated;
  std::string routed_rows;
};

// One expert over its `routed` rows: nonzero of its mask row, the routed copy of
// x, the SwiGLU MLP, the routing weights it gathers, the scaled output and its
// index_add_ into the block's output (a write into `final`: no new storage).
// `current_state` binds the routed copy until the next expert's replaces it, so the
// previous expert's (`previous.routed_rows`) lives until this one's is made.
ExpertStep add_expert(GraphBuilder& b, const MoeSpec& m, int64_t hidden, const std::string& p, int64_t j,
                      const std::string& x, const Routing& routing, const std::string& mask,
                      const ExpertStep& previous) {
  const SizeExpr routed = tokens().scaled(m.top_k).share(m.experts);  // n = T * k / E, balanced
  const std::string e = p + ".experts." + std::to_string(j);
  const ExpertNames names = expert_names(m);
  const int64_t width = m.expert_intermediate;
  // torch.where(cond) is nonzero(cond).unbind(1): idx and top_x view one [n, 2] storage.
  const std::string where = b.copy(e + ".where", std::string(graph::op::kNonzero), {mask}, routed.scaled(2), DType::kInt64);
  const std::string rows = b.op(moe_node(e + ".routed_states", "index", {x, where}, routed.scaled(hidden),
                                         std::nullopt, {{where, SaveWhen::kInputGrad}}));
  if (!previous.routed_rows.empty()) b.hold_until(rows, previous.routed_rows);
  const std::string gate = b.linear(e + "." + names.gate, rows, routed, hidden, width, false);
  const std::string act = b.activation(e + ".act_fn", gate, routed.scaled(width), "silu");
  const std::string up = b.linear(e + "." + names.up, rows, routed, hidden, width, false);
  const std::string prod = b.mul(e + ".act_mul_up", act, up, routed.scaled(width));
  const std::string down = b.linear(e + "." + names.down, prod, routed, width, hidden, false);
  const std::optional<DType> weight_dtype = m.f32_routing_weights ? std::optional<DType>(DType::kF32) : std::nullopt;
  const std::string scale = b.op(moe_node(e + ".routing_weight", "index", {routing.weights, where}, routed,
                                          weight_dtype, {{where, SaveWhen::kInputGrad}}));
  // Mixtral's weights are cast back to x's dtype; DeepSeek-V3's stay float32, and
  // bf16 * f32 promotes the product to float32 (mul keeps both factors either way).
  const std::string weighted =
      m.f32_routing_weights
          ? b.op(moe_node(e + ".weighted", "mul", {down, scale}, routed.scaled(hidden), DType::kF32,
                          {{down, SaveWhen::kInputGrad}, {scale, SaveWhen::kInputGrad}}))
          : b.mul(e + ".weighted", down, scale, routed.scaled(hidden));
  // IndexAddBackward0 keeps the index and the source itself: its formula for the
  // source, grad.index_select(dim, index).expand_as(source), takes the tensor
  // (tools/autograd/derivatives.yaml, index_add; the oracle: mul [n, H] kept per expert).
  const std::string added =
      b.op(moe_node(e + ".index_add", "index_add", {previous.accumulated, weighted, where}, SizeExpr{}, std::nullopt,
                    {{where, SaveWhen::kInputGrad}, {weighted, SaveWhen::kInputGrad}}));
  return {added, rows};
}

}  // namespace

std::string add_expert_loop(GraphBuilder& b, const MoeSpec& m, int64_t hidden, const std::string& p,
                            const std::string& x, const Routing& routing) {
  const SizeExpr states = times(tokens(), hidden);
  const std::optional<DType> accumulator =
      m.f32_routing_weights ? std::optional<DType>(DType::kF32) : std::nullopt;
  const std::string final_states = b.copy(p + ".final_hidden_states", "zeros", {}, states, accumulator);
  // one_hot(selected_experts, E): int64 [T, k, E], referenced by the loop to its end.
  const std::string mask =
      b.copy(p + ".expert_mask", std::string(graph::op::kOneHot), {routing.indices}, tokens().scaled(m.top_k * m.experts), DType::kInt64);
  ExpertStep step{final_states, ""};
  for (int64_t j = 0; j < m.experts; ++j) {
    step = add_expert(b, m, hidden, p, j, x, routing, mask, step);
  }
  b.hold_until(step.accumulated, mask);
  // The block's output is `final`, written in place by every index_add_: one node
  // reading both, the zeros' storage priced once more while it is made.
  std::string out = b.copy(p + ".experts_output", "view", {final_states, step.accumulated}, states, accumulator);
  b.hold_until(out, step.routed_rows);
  // DeepseekV3MoE.moe returns final_hidden_states.type(hidden_states.dtype).
  if (m.f32_routing_weights) out = b.copy(p + ".experts_output_cast", "cast", {out}, states);
  // The block's argument `hidden_states` (x, the normed input) is bound until the
  // block returns, whatever reads it last (the oracle: Mixtral-2L's post-attention
  // norm output live through the last expert).
  b.hold_until(out, x);
  return out;
}

std::string add_expert_loop_block(GraphBuilder& b, const MoeSpec& moe, int64_t hidden, const std::string& p,
                                  const std::string& x) {
  MoeSpec m = moe;
  m.f32_routing_weights = false;  // 4.x casts the weights back to the hidden dtype, Mixtral too
  const SizeExpr states = times(tokens(), hidden);
  const Routing routing = add_router(b, m, hidden, p, x, true);
  const std::string out = add_expert_loop(b, m, hidden, p, x, routing);
  if (m.shared_intermediate == 0) return out;
  // Qwen2MoeSparseMoeBlock runs its shared expert after the loop (4.44.2).
  const std::string shared = add_shared_expert(b, m, hidden, p, x);
  const std::string sum = b.add(p + ".add_shared", out, shared, states);
  b.hold_until(sum, x);
  return sum;
}

// "<prefix>.experts.<J>.<linear>": parsed by hand, not by std::regex, since the
// planner asks it of every node of graphs with tens of thousands of them.
bool is_expert_linear(const std::string& node) {
  const std::string_view name(node);
  const size_t dot = name.rfind('.');
  if (dot == std::string_view::npos) return false;
  const std::string_view linear = name.substr(dot + 1);
  if (linear != "w1" && linear != "w2" && linear != "w3" && linear != "gate_proj" && linear != "up_proj" &&
      linear != "down_proj") {
    return false;
  }
  const std::string_view rest = name.substr(0, dot);
  const size_t index_dot = rest.rfind('.');
  if (index_dot == std::string_view::npos) return false;
  const std::string_view index = rest.substr(index_dot + 1);
  if (index.empty() || !std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  return rest.substr(0, index_dot).ends_with(".experts");
}

}  // namespace headroom::models
