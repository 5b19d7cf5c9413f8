#include "executor/sgd.h"


namespace headroom::executor {

SgdMomentum::SgdMomentum(NamedParameters parameters, SgdOptions options)
    : weights_(std::move(parameters), options.master_weights), options_(options) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < weights_.size(); ++i) buffers_.push_back(torch::zeros_like(weights_.weights(i)));
  started_.assign(weights_.size(), 0);
}

bool SgdMomentum::step(double grad_scale, bool check_finite) {
  torch::NoGradGuard no_grad;
  if (check_finite && !weights_.gradients_finite(grad_scale)) return false;
  ++steps_;
  for (size_t i = 0; i < weights_.size(); ++i) {
    torch::Tensor grad = weights_.gradient(i, grad_scale);
    if (!grad.defined()) continue;
    torch::Tensor& weights = weights_.weights(i);
    if (options_.weight_decay != 0) grad = grad.add(weights, options_.weight_decay);
    torch::Tensor& buf = buffers_[i];
    if (!started_[i]) {
      buf.copy_(grad);  // torch: buf = grad.detach().clone()
      started_[i] = 1;
    } else {
      buf.mul_(options_.momentum).add_(grad);  // dampening 0
    }
    weights.add_(buf, -options_.lr);
    weights_.publish(i);
  }
  return true;
}

int64_t SgdMomentum::state_bytes() const {
  int64_t bytes = weights_.master_bytes();
  for (const torch::Tensor& b : buffers_) bytes += static_cast<int64_t>(b.nbytes());
  return bytes;
}

std::vector<StateTensors> SgdMomentum::state_tensors() const {
  std::vector<StateTensors> out;
  for (const torch::Tensor& buffer : buffers_) out.push_back({{"momentum_buffer", buffer}});
  return out;
}

std::string SgdMomentum::save() const {
  const torch::Tensor started = torch::tensor(std::vector<int64_t>(started_.begin(), started_.end()), torch::kLong);
  return save_optimizer_state(planner::OptimizerKind::kSgdMomentum, steps_, {{"started", started}}, state_tensors(),
                              weights_);
}

void SgdMomentum::load(const std::string& bytes, const std::string& origin) {
  const torch::Tensor started = torch::zeros({static_cast<int64_t>(started_.size())}, torch::kLong);
  steps_ = load_optimizer_state(bytes, origin, planner::OptimizerKind::kSgdMomentum, {{"started", started}},
                                state_tensors(), weights_);
  for (size_t i = 0; i < started_.size(); ++i) started_[i] = started[static_cast<int64_t>(i)].item<int64_t>() != 0;
}

}  // namespace headroom::executor
