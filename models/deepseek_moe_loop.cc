// DeepseekV2MoE.moe as transformers 4.57.6 runs it in training
// (models/deepseek_v2/modeling_deepseek_v2.py): each routed expert its own
// DeepseekV2MLP of nn.Linear modules in an experts ModuleList (bitsandbytes
// quantizes them, PEFT wraps them), run over the tokens sorted by expert:
//   cnts = zeros(T, E).scatter_(1, topk_ids, 1); tokens_per_expert = cnts.sum(0)
//   indices = topk_ids.view(-1).argsort()                  (int64 [T*k])
//   sorted_tokens = hidden_states[indices // k]            (IndexBackward keeps indices // k)
//   for each expert with tokens: expert(sorted_tokens[start:end])   (a view of its rows)
//   outs = cat(outputs); new_x = empty_like(outs); new_x[indices] = outs  (index_put_ keeps indices)
//   new_x.view(T, k, H).type(f32).mul_(topk_weight[..., None]).sum(1).type(x.dtype)
// The in-place mul_ keeps a clone of its f32 input (its `self` before the write,
// for topk_weight's gradient) and topk_weight (for its own). The counts are data:
// each expert is priced at balanced routing, tokens * k / E rows (models/moe_loop.h).
#include <string>
#include <utility>
#include <vector>

#include "models/deepseek_moe.h"
#include "models/layers.h"
#include "models/moe_parts.h"

namespace headroom::models {
namespace {

// One expert's DeepseekV2MLP over its `routed` rows of the sorted copy.
std::string sorted_expert(GraphBuilder& b, const DeepseekConfig& c, const std::string& e, const std::string& rows,
                          SizeExpr routed) {
  const int64_t width = c.moe_intermediate;
  const std::string gate = b.linear(e + ".gate_proj", rows, routed, c.hidden, width, false);
  const std::string up = b.linear(e + ".up_proj", rows, routed, c.hidden, width, false);
  const std::string act = b.activation(e + ".act_fn", gate, routed.scaled(width), "silu");
  const std::string prod = b.mul(e + ".act_mul_up", act, up, routed.scaled(width));
  return b.linear(e + ".down_proj", prod, routed, width, c.hidden, false);
}

// tokens_per_expert, the sort order and the sorted copy of x: returns {indices, sorted_tokens}.
std::pair<std::string, std::string> sort_tokens(GraphBuilder& b, const DeepseekConfig& c, const std::string& p,
                                                const std::string& x, const Routing& routing) {
  const SizeExpr pairs = tokens().scaled(c.top_k);
  b.copy(p + ".tokens_per_expert", "scatter_sum", {routing.indices}, times(tokens(), c.routed_experts),
         DType::kInt64);
  const std::string indices = b.copy(p + ".sorted_indices", "argsort", {routing.indices}, pairs, DType::kInt64);
  const std::string rows_of = b.copy(p + ".token_of_pair", "floor_divide", {indices}, pairs, DType::kInt64);
  const std::string sorted = b.op(moe_node(p + ".sorted_tokens", "index", {x, rows_of}, pairs.scaled(c.hidden),
                                           std::nullopt, {{rows_of, SaveWhen::kInputGrad}}));
  return {indices, sorted};
}

}  // namespace

std::string add_deepseek_v2_expert_loop(GraphBuilder& b, const DeepseekConfig& c, const std::string& p,
                                        const std::string& x, const Routing& routing) {
  const SizeExpr pairs = tokens().scaled(c.top_k);
  const SizeExpr routed = pairs.share(c.routed_experts);  // balanced: T * k / E rows each
  const auto [indices, sorted] = sort_tokens(b, c, p, x, routing);
  std::vector<std::pair<std::string, SizeExpr>> slices;
  for (int64_t j = 0; j < c.routed_experts; ++j) {
    slices.push_back({p + ".experts." + std::to_string(j) + ".rows", routed.scaled(c.hidden)});
  }
  const std::vector<std::string> views = b.split(p + ".expert_rows", sorted, slices);
  std::vector<std::string> outputs;
  for (int64_t j = 0; j < c.routed_experts; ++j) {
    outputs.push_back(sorted_expert(b, c, p + ".experts." + std::to_string(j), views[j], routed));
  }
  const SizeExpr rows_h = pairs.scaled(c.hidden);
  const std::string outs = b.copy(p + ".outs", "cat", outputs, rows_h);
  b.hold_until(outs, sorted);  // the Python local sorted_tokens, to the end of moe()
  const std::string new_x = b.op(moe_node(p + ".new_x", "index_put", {outs, indices}, rows_h, std::nullopt,
                                          {{indices, SaveWhen::kInputGrad}}));
  const std::string wide = b.copy(p + ".new_x_f32", "cast", {new_x}, rows_h, DType::kF32);
  const std::string original = b.copy(p + ".weighted_original", "clone", {wide}, rows_h, DType::kF32);
  const std::string weighted = b.op(moe_node(p + ".weighted", "mul", {wide, routing.weights, original}, rows_h, DType::kF32,
                                             {{original, SaveWhen::kInputGrad},
                                              {routing.weights, SaveWhen::kInputGrad}}));
  const std::string summed = b.copy(p + ".weighted_sum", "sum", {weighted}, times(tokens(), c.hidden), DType::kF32);
  const std::string out = b.copy(p + ".experts_output", "cast", {summed}, times(tokens(), c.hidden));
  b.hold_until(out, x);
  return out;
}

}  // namespace headroom::models
