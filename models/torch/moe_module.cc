#include "models/torch/moe_module.h"

#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

namespace headroom::models::torch_modules {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Row ranges [begin, end) of each expert, from the cumulative int32 offsets.
std::vector<std::pair<int64_t, int64_t>> expert_rows(const torch::Tensor& offsets) {
  const torch::Tensor ends = offsets.to(torch::kCPU, torch::kLong);
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t begin = 0;
  for (int64_t e = 0; e < ends.numel(); ++e) {
    const int64_t end = ends[e].item<int64_t>();
    out.emplace_back(begin, end);
    begin = end;
  }
  return out;
}

// One matmul per expert over its rows; an expert without rows does nothing.
struct GroupedMm : public torch::autograd::Function<GroupedMm> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& offsets) {
    // dx needs the weight (a parameter: no activation), dW needs x: x is kept only
    // when the weight trains, as the planner's grouped_mm node keeps it (kParamGrad).
    ctx->save_for_backward({weight.requires_grad() ? x : torch::Tensor(),
                            x.requires_grad() ? weight : torch::Tensor(), offsets});
    torch::Tensor out = torch::empty({x.size(0), weight.size(1)}, x.options());
    const auto rows = expert_rows(offsets);
    for (size_t e = 0; e < rows.size(); ++e) {
      const auto [begin, end] = rows[e];
      if (end <= begin) continue;
      torch::Tensor slice = out.narrow(0, begin, end - begin);
      torch::mm_out(slice, x.narrow(0, begin, end - begin), weight.select(0, static_cast<int64_t>(e)).t());
    }
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& g = grad_outputs[0];
    const auto rows = expert_rows(saved[2]);
    torch::Tensor dx;
    torch::Tensor dw;
    if (ctx->needs_input_grad(0)) dx = torch::zeros({g.size(0), weight.size(2)}, g.options());
    if (ctx->needs_input_grad(1)) dw = torch::zeros({static_cast<int64_t>(rows.size()), g.size(1), x.size(1)}, g.options());
    for (size_t e = 0; e < rows.size(); ++e) {
      const auto [begin, end] = rows[e];
      if (end <= begin) continue;
      const torch::Tensor ge = g.narrow(0, begin, end - begin);
      const auto expert = static_cast<int64_t>(e);
      if (dx.defined()) {
        torch::Tensor out = dx.narrow(0, begin, end - begin);
        torch::mm_out(out, ge, weight.select(0, expert));
      }
      if (dw.defined()) {
        torch::Tensor out = dw.select(0, expert);
        torch::mm_out(out, ge.t(), x.narrow(0, begin, end - begin));
      }
    }
    return {dx, dw, torch::Tensor()};
  }
};

// A weight [..., out, in] initialised as nn.Linear(in, out)'s: U(-1/sqrt(in), 1/sqrt(in)).
torch::Tensor linear_init(std::vector<int64_t> shape) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(shape.back()));
  return torch::empty(shape).uniform_(-bound, bound);
}

struct Routing {
  torch::Tensor weights;  // [T, k]: f32 (Mixtral), else the logits' dtype
  torch::Tensor indices;  // [T, k] int64 expert ids
};

// <Family>TopKRouter.forward (transformers 5.23.0 models/mixtral/modeling_mixtral.py,
// models/qwen3_moe/modeling_qwen3_moe.py): F.linear over the parameter, softmax in
// float32 (softmax keeps its f32 output), topk (keeps the indices), renormalised
// when norm_topk_prob: the graph's in-place div_ keeps a clone of the values and
// the sums, this division keeps the values and the sums, the same bytes.
Routing route(const torch::Tensor& x, const torch::Tensor& router, const MoeSpec& m) {
  const torch::Tensor logits = torch::nn::functional::linear(x, router);
  // float32 for every training dtype; a float64 module (the tests' reference runs) stays float64.
  const torch::Tensor probs = torch::softmax(logits, -1, at::promote_types(logits.scalar_type(), torch::kFloat));
  auto [values, indices] = torch::topk(probs, m.top_k, -1);
  if (m.norm_topk) values = values / values.sum(-1, true);
  if (!m.f32_routing_weights) values = values.to(logits.scalar_type());
  return {values, indices};
}

}  // namespace

torch::Tensor grouped_mm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& offsets) {
  return GroupedMm::apply(x, weight, offsets);
}

SparseMoeBlockImpl::SparseMoeBlockImpl(const MoeSpec& m, int64_t hidden) : spec(m) {
  const int64_t width = m.expert_intermediate;
  router = register_module("gate", std::make_shared<torch::nn::Module>())
               ->register_parameter("weight", linear_init({m.experts, hidden}));
  auto experts = register_module("experts", std::make_shared<torch::nn::Module>());
  gate_up_proj = experts->register_parameter("gate_up_proj", linear_init({m.experts, 2 * width, hidden}));
  down_proj = experts->register_parameter("down_proj", linear_init({m.experts, hidden, width}));
}

// grouped_mm_experts_forward (transformers 5.23.0 integrations/moe.py) as the
// graph builds it (models/moe.cc add_routed_experts): the T x k (token, slot)
// pairs sorted by expert (stable), their rows gathered (index keeps perm // k),
// the routing weights in the same order (index keeps perm), gate_up, SiLU(gate)
// x up, down, times the weights (both kept), back to token order (index keeps
// inv_perm), summed over k. Every kept tensor has T x k rows however the router
// chose: the bytes do not depend on the routing (docs/models.md).
torch::Tensor SparseMoeBlockImpl::forward(const torch::Tensor& input) {
  const torch::Tensor x = input.reshape({-1, input.size(-1)});
  const Routing r = route(x, router, spec);
  const int64_t routed = x.size(0) * spec.top_k;
  const torch::Tensor flat = r.indices.reshape({-1});
  const torch::Tensor perm = std::get<1>(torch::sort(flat, /*stable=*/true, /*dim=*/0, /*descending=*/false));
  const torch::Tensor token_of = torch::div(perm, spec.top_k, "floor");
  const torch::Tensor inv_perm = torch::empty_like(perm).index_put_({perm}, torch::arange(routed, perm.options()));
  const torch::Tensor counts = torch::bincount(flat, {}, spec.experts);
  const torch::Tensor offsets = counts.cumsum(0, torch::kInt);
  const torch::Tensor host_counts = counts.to(torch::kCPU);
  last_counts.assign(host_counts.data_ptr<int64_t>(), host_counts.data_ptr<int64_t>() + host_counts.numel());
  const torch::Tensor rows = x.index({token_of});
  const torch::Tensor scale = r.weights.reshape({-1}).index({perm});
  const torch::Tensor gate_up = grouped_mm(rows, gate_up_proj, offsets);
  const std::vector<torch::Tensor> halves = gate_up.chunk(2, -1);
  const torch::Tensor down = grouped_mm(torch::silu(halves[0]) * halves[1], down_proj, offsets);
  // Mixtral's f32 weights promote the product, and the sum, to f32 (cast back last).
  const torch::Tensor weighted = down * scale.unsqueeze(-1);
  const torch::Tensor summed = weighted.index({inv_perm}).view({x.size(0), spec.top_k, x.size(1)}).sum(1);
  return summed.to(input.scalar_type()).view(input.sizes());
}

}  // namespace headroom::models::torch_modules
