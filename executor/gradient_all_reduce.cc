#include "executor/gradient_all_reduce.h"

namespace headroom::executor {

torch::Tensor bucket_gradients(const ZeroBucket& bucket, const NamedParameters& parameters, int64_t length,
                               const torch::TensorOptions& options) {
  torch::Tensor flat = torch::zeros({length}, options);
  for (size_t j = 0; j < bucket.parameters.size(); ++j) {
    const torch::Tensor& grad = parameters[bucket.parameters[j]].second.grad();
    if (grad.defined()) flat.narrow(0, bucket.offsets[j], grad.numel()).copy_(grad.reshape(-1));
  }
  return flat;
}

Status all_reduce_gradients(const NamedParameters& parameters, Communicator& communicator, int64_t bucket_elements) {
  if (communicator.world_size() == 1 || parameters.empty()) return Status::ok();
  torch::NoGradGuard no_grad;
  std::vector<int64_t> elements;
  for (const auto& [name, tensor] : parameters) elements.push_back(tensor.numel());
  // World 1: buckets without padding, the order backward produced them.
  const ZeroLayout layout(elements, bucket_elements, 1, 0);
  const torch::Tensor& first = parameters.front().second;
  for (const ZeroBucket& bucket : layout.buckets()) {
    torch::Tensor flat = bucket_gradients(bucket, parameters, bucket.elements, first.options().requires_grad(false));
    if (Status s = communicator.all_reduce_sum(flat); !s.is_ok()) {
      return s.with_prefix("all-reduce of gradients: ");
    }
    for (size_t j = 0; j < bucket.parameters.size(); ++j) {
      torch::Tensor& grad = parameters[bucket.parameters[j]].second.mutable_grad();
      if (grad.defined()) grad.copy_(flat.narrow(0, bucket.offsets[j], grad.numel()).view(grad.sizes()));
    }
  }
  return Status::ok();
}

}  // namespace headroom::executor
