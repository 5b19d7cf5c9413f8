#include "executor/adamw8bit.h"

#include <algorithm>
#include <cmath>

namespace headroom::executor {

AdamW8bit::AdamW8bit(NamedParameters parameters, AdamW8bitOptions options)
    : weights_(std::move(parameters), options.master_weights), options_(options) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < weights_.size(); ++i) {
    const torch::Tensor& p = weights_.parameter(i);
    State s;
    if (p.numel() < options_.min_8bit_size) {
      // init_state: dtype float32 for small tensors, whatever the parameter's.
      s.state1 = torch::zeros(p.sizes(), p.options().dtype(torch::kFloat));
      s.state2 = torch::zeros(p.sizes(), p.options().dtype(torch::kFloat));
    } else {
      const int64_t blocks = (p.numel() + bnb::kBlockSize - 1) / bnb::kBlockSize;
      s.state1 = torch::zeros(p.sizes(), p.options().dtype(torch::kByte));
      s.state2 = torch::zeros(p.sizes(), p.options().dtype(torch::kByte));
      s.absmax1 = torch::zeros({blocks}, p.options().dtype(torch::kFloat));
      s.absmax2 = torch::zeros({blocks}, p.options().dtype(torch::kFloat));
      if (!qmap1_.defined()) {
        // Shared by every parameter, as bitsandbytes' name2qmap (two 1 KiB tensors per device).
        qmap1_ = bnb::dynamic_map(true).to(p.device());
        qmap2_ = bnb::dynamic_map(false).to(p.device());
      }
    }
    states_.push_back(std::move(s));
  }
}

bool AdamW8bit::step(double grad_scale, bool check_finite) {
  torch::NoGradGuard no_grad;
  if (check_finite && !weights_.gradients_finite(grad_scale)) return false;
  // bitsandbytes counts steps per parameter (state["step"]); every parameter
  // with a gradient steps together here, so one count serves all of them.
  ++steps_;
  for (size_t i = 0; i < weights_.size(); ++i) {
    const torch::Tensor grad = weights_.gradient(i, grad_scale);
    if (!grad.defined()) continue;
    torch::Tensor& weights = weights_.weights(i);
    if (quantized(i)) {
      update_quantized(states_[i], weights, grad);
    } else {
      update_32bit(states_[i], weights, grad);
    }
    weights_.publish(i);
  }
  return true;
}

// _optimizer_update_8bit_blockwise_cpu, "adam" branch.
void AdamW8bit::update_quantized(State& s, torch::Tensor& weights, const torch::Tensor& grad_in) const {
  const AdamWHyper& h = options_.hyper;
  torch::Tensor m = bnb::dequantize_blockwise(s.state1, s.absmax1, qmap1_);
  torch::Tensor v = bnb::dequantize_blockwise(s.state2, s.absmax2, qmap2_);
  const torch::Tensor grad = grad_in.to(torch::kFloat);
  torch::Tensor p = weights.to(torch::kFloat);  // the weights themselves when fp32
  const double t = static_cast<double>(steps_);
  m.mul_(h.beta1).add_(grad, 1.0 - h.beta1);
  v.mul_(h.beta2).addcmul_(grad, grad, 1.0 - h.beta2);
  const double correction1 = 1.0 - std::pow(h.beta1, t);
  const double correction2 = std::sqrt(1.0 - std::pow(h.beta2, t));
  const torch::Tensor denom = (v.sqrt() / correction2).add_(h.eps);
  if (h.weight_decay > 0.0) p.mul_(1.0 - h.lr * h.weight_decay);
  p.addcdiv_(m, denom, -h.lr / correction1);
  if (!p.is_same(weights)) weights.copy_(p);
  auto [q1, a1] = bnb::quantize_blockwise(m, qmap1_);
  s.state1.copy_(q1);
  s.absmax1.copy_(a1);
  auto [q2, a2] = bnb::quantize_blockwise(v, qmap2_);
  s.state2.copy_(q2);
  s.absmax2.copy_(a2);
}

// _optimizer_update_32bit_cpu, "adam" branch (max_unorm 0: no update scaling).
void AdamW8bit::update_32bit(State& s, torch::Tensor& weights, const torch::Tensor& grad_in) const {
  const AdamWHyper& h = options_.hyper;
  const torch::Tensor grad = grad_in.to(torch::kFloat);
  torch::Tensor p = weights.to(torch::kFloat);
  const double t = static_cast<double>(steps_);
  s.state1.mul_(h.beta1).add_(grad, 1.0 - h.beta1);
  s.state2.mul_(h.beta2).addcmul_(grad, grad, 1.0 - h.beta2);
  const double correction1 = 1.0 - std::pow(h.beta1, t);
  const double correction2 = std::sqrt(1.0 - std::pow(h.beta2, t));
  const double step_size = -h.lr * correction2 / correction1;
  if (h.weight_decay > 0.0) p.mul_(1.0 - h.lr * h.weight_decay);
  const torch::Tensor update = s.state1 / (s.state2.sqrt() + h.eps * correction2);
  p.add_(update, step_size);
  if (!p.is_same(weights)) weights.copy_(p);
}

std::pair<torch::Tensor, torch::Tensor> AdamW8bit::moments(size_t i) const {
  const State& s = states_[i];
  if (!s.absmax1.defined()) return {s.state1.clone(), s.state2.clone()};
  return {bnb::dequantize_blockwise(s.state1, s.absmax1, qmap1_),
          bnb::dequantize_blockwise(s.state2, s.absmax2, qmap2_)};
}

int64_t AdamW8bit::state_bytes() const {
  int64_t bytes = weights_.master_bytes();
  for (const State& s : states_) {
    for (const torch::Tensor* t : {&s.state1, &s.state2, &s.absmax1, &s.absmax2}) {
      if (t->defined()) bytes += static_cast<int64_t>(t->nbytes());
    }
  }
  return bytes;
}

std::vector<StateTensors> AdamW8bit::state_tensors() const {
  std::vector<StateTensors> out;
  for (const State& s : states_) {
    StateTensors tensors{{"state1", s.state1}, {"state2", s.state2}};
    if (s.absmax1.defined()) {
      tensors.emplace_back("absmax1", s.absmax1);
      tensors.emplace_back("absmax2", s.absmax2);
    }
    out.push_back(std::move(tensors));
  }
  return out;
}

std::string AdamW8bit::save() const {
  return save_optimizer_state(planner::OptimizerKind::kAdamW8bit, steps_, {}, state_tensors(), weights_);
}

void AdamW8bit::load(const std::string& bytes, const std::string& origin) {
  steps_ = load_optimizer_state(bytes, origin, planner::OptimizerKind::kAdamW8bit, {}, state_tensors(), weights_);
}

}  // namespace headroom::executor
