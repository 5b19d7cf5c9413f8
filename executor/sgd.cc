#include "executor/sgd.h"

#include <sstream>

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

std::string SgdMomentum::save() const {
  torch::serialize::OutputArchive archive;
  write_optimizer_kind(archive, planner::OptimizerKind::kSgdMomentum);
  archive.write("steps", torch::tensor(steps_, torch::kLong));
  archive.write("started", torch::tensor(std::vector<int64_t>(started_.begin(), started_.end()), torch::kLong));
  for (size_t i = 0; i < weights_.size(); ++i) {
    archive.write(weights_.name(i) + "/momentum_buffer", buffers_[i].cpu());
  }
  weights_.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void SgdMomentum::load(const std::string& bytes, const std::string& origin) {
  torch::NoGradGuard no_grad;
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  check_optimizer_kind(archive, planner::OptimizerKind::kSgdMomentum, origin);
  torch::Tensor steps = torch::zeros({}, torch::kLong);
  read_state(archive, "steps", steps, origin);
  steps_ = steps.item<int64_t>();
  torch::Tensor started = torch::zeros({static_cast<int64_t>(started_.size())}, torch::kLong);
  read_state(archive, "started", started, origin);
  for (size_t i = 0; i < started_.size(); ++i) started_[i] = started[static_cast<int64_t>(i)].item<int64_t>() != 0;
  for (size_t i = 0; i < weights_.size(); ++i) {
    read_state(archive, weights_.name(i) + "/momentum_buffer", buffers_[i], origin);
  }
  weights_.load(archive, origin);
}

}  // namespace headroom::executor
