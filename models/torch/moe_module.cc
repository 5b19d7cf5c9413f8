#include "models/torch/moe_module.h"

#include <cmath>
#include <string_view>
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

// The weight a wrapped parameter's module sees. Experts (_LoraFactorsProxy):
// baddbmm(W, B [E, out, r], A [E, r, in]) with the factors cast to W's dtype, the
// whole stack at full size. The router (_LoraParameterProxy): W + (B @ A) scaled.
torch::Tensor recomposed(const torch::Tensor& w, const ParamLora& lora) {
  if (!lora.defined()) return w;
  if (w.dim() == 2) return w + (torch::mm(lora.b, lora.a) * lora.scale).to(w.scalar_type());
  const int64_t e = w.size(0);
  const torch::Tensor a = lora.a.reshape({e, -1, w.size(2)}).to(w.scalar_type());
  const torch::Tensor b = lora.b.reshape({w.size(1), -1, e}).permute({2, 0, 1}).to(w.scalar_type());
  return torch::baddbmm(w, b, a, /*beta=*/1, /*alpha=*/lora.scale);
}

}  // namespace

torch::Tensor grouped_mm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& offsets) {
  return GroupedMm::apply(x, weight, offsets);
}

SparseMoeBlockImpl::SparseMoeBlockImpl(const MoeSpec& m, int64_t hidden) : spec(m) {
  const int64_t width = m.expert_intermediate;
  gate_ = register_module("gate", std::make_shared<torch::nn::Module>());
  router = gate_->register_parameter("weight", linear_init({m.experts, hidden}));
  experts_ = register_module("experts", std::make_shared<torch::nn::Module>());
  gate_up_proj = experts_->register_parameter("gate_up_proj", linear_init({m.experts, 2 * width, hidden}));
  down_proj = experts_->register_parameter("down_proj", linear_init({m.experts, hidden, width}));
}

void SparseMoeBlockImpl::wrap(const std::string& which, int64_t rank, double scale) {
  const bool is_router = which == "gate";
  torch::nn::Module& owner = is_router ? *gate_ : *experts_->register_module(which.substr(which.find('.') + 1),
                                                                            std::make_shared<torch::nn::Module>());
  const torch::Tensor& w = is_router ? router : which == "experts.gate_up_proj" ? gate_up_proj : down_proj;
  const int64_t e = w.dim() == 3 ? w.size(0) : 1;
  const int64_t out = w.dim() == 3 ? w.size(1) : w.size(0);
  ParamLora lora;
  lora.a = owner.register_module("lora_A", std::make_shared<torch::nn::Module>())
               ->register_parameter("weight", linear_init({e * rank, w.size(-1)}).to(w.options()));
  lora.b = owner.register_module("lora_B", std::make_shared<torch::nn::Module>())
               ->register_parameter("weight", torch::zeros({out, rank * e}, w.options()));
  lora.scale = scale;
  (is_router ? router_lora : which == "experts.gate_up_proj" ? gate_up_lora : down_lora) = lora;
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
  const Routing r = route(x, recomposed(router, router_lora), spec);
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
  const torch::Tensor gate_up = grouped_mm(rows, recomposed(gate_up_proj, gate_up_lora), offsets);
  const std::vector<torch::Tensor> halves = gate_up.chunk(2, -1);
  const torch::Tensor down =
      grouped_mm(torch::silu(halves[0]) * halves[1], recomposed(down_proj, down_lora), offsets);
  // Mixtral's f32 weights promote the product, and the sum, to f32 (cast back last).
  const torch::Tensor weighted = down * scale.unsqueeze(-1);
  const torch::Tensor summed = weighted.index({inv_perm}).view({x.size(0), spec.top_k, x.size(1)}).sum(1);
  return summed.to(input.scalar_type()).view(input.sizes());
}

int wrap_param_lora(torch::nn::Module& root, const graph::LayerGraph& graph, double scale) {
  int wrapped = 0;
  for (const auto& item : root.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    auto block = std::dynamic_pointer_cast<SparseMoeBlockImpl>(item.value());
    if (!block) continue;
    for (const char* which : {"gate", "experts.gate_up_proj", "experts.down_proj"}) {
      const graph::Node* node = graph.find_node(item.key() + "." + which);
      if (node == nullptr) continue;
      for (const graph::Param& param : node->params) {
        if (!param.name.ends_with(".lora_A.weight")) continue;
        // lora_A is [E r, in] on the experts, [r, in] on the router.
        const int64_t experts = std::string_view(which) == "gate" ? 1 : block->spec.experts;
        block->wrap(which, param.shape[0] / experts, scale);
        ++wrapped;
      }
    }
  }
  return wrapped;
}

}  // namespace headroom::models::torch_modules
