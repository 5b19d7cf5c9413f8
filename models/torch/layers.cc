#include "models/torch/layers.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>

namespace headroom::models::torch_modules {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The statistics' dtype: f32 for half types (as the fused CUDA kernels), else the input's.
torch::ScalarType stats_dtype(const torch::Tensor& x) {
  return x.is_floating_point() && c10::elementSize(x.scalar_type()) < 4 ? torch::kFloat : x.scalar_type();
}

// y = w * x * rstd, rstd = 1 / sqrt(mean(x^2) + eps) per row. Saves x, w and
// rstd ([rows, 1]); backward: dx = rstd * (g w - xhat * mean(g w xhat)),
// dw = sum over rows of g xhat, with xhat = x * rstd.
struct FusedRmsNorm : public torch::autograd::Function<FusedRmsNorm> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight, double eps) {
    const torch::Tensor xs = x.to(stats_dtype(x));
    const torch::Tensor rstd = torch::rsqrt(xs.pow(2).mean(-1, true) + eps);
    ctx->save_for_backward({x, weight, rstd});
    return (xs * rstd).to(x.scalar_type()) * weight;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& rstd = saved[2];
    const torch::Tensor g = grad_outputs[0].to(rstd.scalar_type());
    const torch::Tensor xhat = x.to(rstd.scalar_type()) * rstd;
    torch::Tensor dx;
    torch::Tensor dw;
    if (x.requires_grad()) {
      const torch::Tensor gw = g * weight.to(rstd.scalar_type());
      dx = (rstd * (gw - xhat * (gw * xhat).mean(-1, true))).to(x.scalar_type());
    }
    if (weight.requires_grad()) {
      dw = (g * xhat).reshape({-1, x.size(-1)}).sum(0).to(weight.scalar_type());
    }
    return {dx, dw, torch::Tensor()};
  }
};

bool ends_with_component(const std::string& name, const std::string& target) {
  if (name == target) return true;
  return name.size() > target.size() && name.compare(name.size() - target.size(), target.size(), target) == 0 &&
         name[name.size() - target.size() - 1] == '.';
}

}  // namespace

LinearImpl::LinearImpl(int64_t in, int64_t out, bool with_bias) {
  weight = register_parameter("weight", torch::empty({out, in}));
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (with_bias) {
    // nn.Linear's default: U(-1/sqrt(in), 1/sqrt(in)).
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    bias = register_parameter("bias", torch::empty({out}).uniform_(-bound, bound));
  }
}

LinearImpl::LinearImpl(torch::Tensor tied_weight) : weight(std::move(tied_weight)) {}

void LinearImpl::add_lora(int64_t rank, double alpha, double dropout) {
  lora_dropout = dropout;
  // Submodules, so the names read "....q_proj.lora_A.weight" as in PEFT checkpoints.
  lora_a = register_module("lora_A", std::make_shared<torch::nn::Module>())
               ->register_parameter("weight", torch::empty({rank, weight.size(1)}, weight.options()));
  torch::nn::init::kaiming_uniform_(lora_a, std::sqrt(5.0));
  lora_b = register_module("lora_B", std::make_shared<torch::nn::Module>())
               ->register_parameter("weight", torch::zeros({weight.size(0), rank}, weight.options()));
  lora_scale = alpha / static_cast<double>(rank);
}

void LinearImpl::quantize_nf4(bool double_quant) {
  if (nf4) return;
  torch::NoGradGuard no_grad;
  Nf4Weight q = models::torch_modules::quantize_nf4(weight, double_quant);
  weight.set_requires_grad(false);  // a 4-bit weight is frozen: it has no gradient
  weight.set_data(q.packed);
  q.packed = weight;
  for (const auto& [name, tensor] : q.tensors()) {
    if (!name.empty()) register_buffer("weight_" + name, tensor);
  }
  if (q.double_quant()) register_buffer("weight_offset", q.offset);
  nf4 = std::move(q);
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  namespace F = torch::nn::functional;
  // Under autocast an fp32 input (a LayerNorm's output, the residual it made fp32)
  // is cast to the layer's 16-bit dtype; bitsandbytes' Linear4bit casts to its
  // compute dtype itself (x.to(self.compute_dtype)) and copies the result back
  // (out.to(inp_dtype)).
  const torch::ScalarType low = nf4 ? nf4->dtype : weight.scalar_type();
  const bool cast_input = autocast && x.scalar_type() != low;
  torch::Tensor x_low = cast_input ? x.to(low) : x;
  torch::Tensor y;
  if (nf4) {
    y = nf4_linear(x_low, *nf4);
    if (bias.defined()) y = y + bias;
    if (cast_input) y = y.to(x.scalar_type());
  } else {
    y = F::linear(x_low, weight, bias);
  }
  if (!lora_a.defined()) return y;
  const bool dropout = lora_dropout > 0 && is_training();
  if (cast_input && !dropout) {
    // lora_A casts the same fp32 x (PEFT's cast to fp32 adapters is a no-op on it):
    // one 16-bit copy a layer, which lora_A keeps, as the planner counts it.
    const torch::Tensor a = adapter_autocast ? lora_a.to(low) : lora_a;
    const torch::Tensor b = adapter_autocast ? lora_b.to(low) : lora_b;
    return y + F::linear(F::linear(x_low, a), b) * lora_scale;
  }
  x_low = torch::Tensor();  // the base layer's copy is gone once it returns
  // native_dropout keeps a bool mask for backward on every device (the generic
  // CPU dropout would keep a mask in the compute dtype): what the planner counts.
  // PEFT's input cast (peft/tuners/lora/layer.py: x = self._cast_input_dtype(x, lora_A.weight.dtype)),
  // which its bitsandbytes layers skip under autocast (bnb.py: requires_conversion).
  const torch::Tensor xa = adapter_autocast && !nf4 ? x.to(lora_a.scalar_type()) : x;
  torch::Tensor a_input =
      dropout ? std::get<0>(at::native_dropout(xa, lora_dropout, true)) : xa;
  if (!adapter_autocast) {
    if (cast_input) a_input = a_input.to(low);
    return y + F::linear(F::linear(a_input, lora_a), lora_b) * lora_scale;
  }
  // Autocast's casts for linear, the input and both weights (not cached for
  // activations; the adapters' casts are what backward keeps for dX).
  return y + F::linear(F::linear(a_input.to(low), lora_a.to(low)), lora_b.to(low)) * lora_scale;
}

LayerNormImpl::LayerNormImpl(int64_t width_, double epsilon, bool affine) : width(width_), eps(epsilon) {
  if (!affine) return;
  weight = register_parameter("weight", torch::ones({width}));
  bias = register_parameter("bias", torch::zeros({width}));
}

torch::Tensor LayerNormImpl::forward(const torch::Tensor& x) {
  namespace F = torch::nn::functional;
  auto options = F::LayerNormFuncOptions({width}).eps(eps);
  // Autocast's fp32 policy casts every floating-point argument to fp32 (copies:
  // upcasts are never cached); native_layer_norm keeps the copies of x, the
  // weight and the bias for backward.
  const auto as_run = [&](const torch::Tensor& t) { return autocast ? t.to(torch::kFloat) : t; };
  if (weight.defined()) options = options.weight(as_run(weight)).bias(as_run(bias));
  return F::layer_norm(as_run(x), options);
}

RMSNormImpl::RMSNormImpl(int64_t width, double epsilon, bool python_ops) : eps(epsilon), transformers_ops(python_ops) {
  weight = register_parameter("weight", torch::ones({width}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  if (!transformers_ops) return FusedRmsNorm::apply(x, weight, eps);
  const torch::Tensor xs = x.to(torch::kFloat);
  const torch::Tensor normed = xs * torch::rsqrt(xs.pow(2).mean(-1, true) + eps);
  return weight * normed.to(x.scalar_type());
}

std::shared_ptr<torch::nn::Module> named_scope(torch::nn::Module& parent, const std::string& name) {
  return parent.register_module(name, std::make_shared<torch::nn::Module>());
}

LayerNorm layer_norm(int64_t width, double eps) { return LayerNorm(width, eps); }

void enable_autocast(torch::nn::Module& root) {
  for (const auto& module : root.modules()) {
    if (auto* linear = dynamic_cast<LinearImpl*>(module.get())) linear->autocast = true;
    if (auto* norm = dynamic_cast<LayerNormImpl*>(module.get())) norm->autocast = true;
  }
}

torch::Tensor encoder_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                int64_t heads, double dropout_p, bool causal) {
  const int64_t batch = q.size(0);
  const int64_t seq = q.size(1);
  const int64_t width = q.size(2);
  auto split = [&](const torch::Tensor& t) { return t.view({batch, seq, heads, width / heads}).transpose(1, 2); };
  const torch::Tensor attn = at::scaled_dot_product_attention(split(q), split(k), split(v), {}, dropout_p, causal);
  return attn.transpose(1, 2).reshape({batch, seq, width});
}

int add_lora_adapters(torch::nn::Module& root, const LoraOptions& lora) {
  if (lora.rank <= 0) return 0;
  int added = 0;
  for (const auto& item : root.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    auto linear = std::dynamic_pointer_cast<LinearImpl>(item.value());
    if (!linear || linear->lora_a.defined()) continue;
    const bool skipped = std::any_of(lora.skip.begin(), lora.skip.end(), [&](const std::string& pattern) {
      return fnmatch(pattern.c_str(), item.key().c_str(), 0) == 0;
    });
    if (skipped) continue;
    for (const std::string& target : lora.targets) {
      if (ends_with_component(item.key(), target)) {
        linear->add_lora(lora.rank, lora.alpha, lora.dropout);
        ++added;
        break;
      }
    }
  }
  return added;
}

void freeze_base(torch::nn::Module& root) {
  for (auto& item : root.named_parameters()) {
    item.value().set_requires_grad(item.key().find("lora_") != std::string::npos);
  }
}

std::vector<torch::Tensor> trainable_parameters(torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : module.parameters()) {
    if (p.requires_grad()) out.push_back(p);
  }
  return out;
}

std::vector<torch::Tensor> run_block(const BlockRunner& runner, const std::string& name, torch::nn::Module& block,
                                     const BlockFn& fn, const std::vector<torch::Tensor>& inputs) {
  if (runner) return runner(name, block, fn, inputs);
  return fn(inputs);
}

}  // namespace headroom::models::torch_modules
