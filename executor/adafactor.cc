#include "executor/adafactor.h"

#include <algorithm>
#include <cmath>

namespace headroom::executor {
namespace {

double dtype_eps(torch::ScalarType type) {
  switch (type) {
    case torch::kBFloat16: return 0.0078125;        // torch.finfo(torch.bfloat16).eps = 2^-7
    case torch::kHalf: return 0.0009765625;         // 2^-10
    case torch::kDouble: return 2.220446049250313e-16;  // 2^-52
    default: return 1.1920928955078125e-07;         // float32: 2^-23
  }
}

}  // namespace

Adafactor::Adafactor(NamedParameters parameters, AdafactorOptions options)
    : weights_(std::move(parameters), options.master_weights), options_(options) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < weights_.size(); ++i) {
    const torch::Tensor& w = weights_.weights(i);
    const auto fp32 = w.options().dtype(torch::kFloat);
    State s;
    if (w.dim() > 1) {
      std::vector<int64_t> row(w.sizes().begin(), w.sizes().end());
      std::vector<int64_t> col = row;
      row.back() = 1;
      col[col.size() - 2] = 1;
      s.row_var = torch::zeros(row, fp32);
      s.col_var = torch::zeros(col, fp32);
    } else {
      s.variance = torch::zeros(w.sizes(), fp32);
    }
    // torch takes eps1 from the dtype of the parameter it steps: the master
    // under mixed precision, the (bf16) parameter itself without one.
    s.eps1 = options_.eps1.value_or(dtype_eps(w.scalar_type()));
    states_.push_back(std::move(s));
  }
}

bool Adafactor::step(double grad_scale, bool check_finite) {
  torch::NoGradGuard no_grad;
  if (check_finite && !weights_.gradients_finite(grad_scale)) return false;
  ++steps_;
  for (size_t i = 0; i < weights_.size(); ++i) {
    const torch::Tensor grad = weights_.gradient(i, grad_scale);
    if (!grad.defined()) continue;
    update(i, grad, static_cast<double>(steps_));
    weights_.publish(i);
  }
  return true;
}

// _single_tensor_adafactor, line for line (maximize off); `step` is the
// parameter's step count t after the increment.
void Adafactor::update(size_t i, const torch::Tensor& raw_grad, double step) {
  torch::Tensor& stored = weights_.weights(i);
  const bool upcast = stored.scalar_type() != torch::kFloat;  // pure bf16: compute in fp32
  torch::Tensor param = upcast ? stored.to(torch::kFloat) : stored;
  const torch::Tensor grad = raw_grad.to(torch::kFloat);
  State& s = states_[i];
  const AdafactorOptions& o = options_;

  const double one_minus_beta2_t = std::pow(step, o.beta2_decay);
  const double rho_t = std::min(o.lr, 1.0 / std::pow(step, 0.5));
  const double rms = param.norm(2).item<double>() / std::pow(static_cast<double>(param.numel()), 0.5);
  const double alpha = std::max(o.eps2, rms) * rho_t;
  if (o.weight_decay != 0) param.mul_(1 - o.lr * o.weight_decay);

  torch::Tensor var_estimate;
  if (grad.dim() > 1) {
    // (g * g).mean(dim) without a gradient-sized temporary, as torch computes it
    const torch::Tensor row_mean =
        torch::norm(grad, 2, {-1}, /*keepdim=*/true).square_().div_(static_cast<double>(grad.size(-1)));
    s.row_var.lerp_(row_mean, one_minus_beta2_t);
    const torch::Tensor col_mean =
        torch::norm(grad, 2, {-2}, /*keepdim=*/true).square_().div_(static_cast<double>(grad.size(-2)));
    s.col_var.lerp_(col_mean, one_minus_beta2_t);
    var_estimate = torch::matmul(s.row_var, s.col_var);
    var_estimate.div_(s.row_var.mean({-2}, /*keepdim=*/true).clamp_(s.eps1));
  } else {
    s.variance.lerp_(grad * grad, one_minus_beta2_t);
    var_estimate = s.variance.clone();
  }
  // eps1 squared: the root below brings it back to eps1's magnitude.
  torch::Tensor update = var_estimate.clamp_(s.eps1 * s.eps1).rsqrt_();
  update.mul_(grad);
  const double denom = std::max(
      1.0, update.norm(2).item<double>() / (std::pow(static_cast<double>(update.numel()), 0.5) * o.d));
  param.add_(update, -alpha / denom);
  if (upcast) stored.copy_(param);
}

int64_t Adafactor::state_bytes() const {
  int64_t bytes = weights_.master_bytes();
  for (const State& s : states_) {
    for (const torch::Tensor* t : {&s.row_var, &s.col_var, &s.variance}) {
      if (t->defined()) bytes += static_cast<int64_t>(t->nbytes());
    }
  }
  return bytes;
}

std::vector<StateTensors> Adafactor::state_tensors() const {
  std::vector<StateTensors> out;
  for (const State& s : states_) {
    out.push_back(s.row_var.defined() ? StateTensors{{"row_var", s.row_var}, {"col_var", s.col_var}}
                                      : StateTensors{{"variance", s.variance}});
  }
  return out;
}

std::string Adafactor::save() const {
  return save_optimizer_state(planner::OptimizerKind::kAdafactor, steps_, {}, state_tensors(), weights_);
}

void Adafactor::load(const std::string& bytes, const std::string& origin) {
  steps_ = load_optimizer_state(bytes, origin, planner::OptimizerKind::kAdafactor, {}, state_tensors(), weights_);
}

}  // namespace headroom::executor
