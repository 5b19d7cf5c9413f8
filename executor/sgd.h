// SGD with momentum as torch.optim.SGD does it (torch/optim/sgd.py,
// _single_tensor_sgd; dampening 0, nesterov off): weight decay added to the
// gradient (L2, not decoupled), the momentum buffer a clone of the gradient at
// a parameter's first step and buf = momentum * buf + grad after, then
// p -= lr * buf. One buffer per parameter in the weights' dtype (fp32 beside
// fp32 master weights, the parameter's dtype without), allocated here rather
// than at the first step so its bytes are measurable up front: what the
// planner counts (planner/memory/model_states.cc, kSgdMomentum).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "executor/optimizer.h"

namespace headroom::executor {

struct SgdOptions {
  double lr = 1e-3;
  // torch.optim.SGD defaults to 0, which keeps no state; the planner prices
  // "SGD with momentum" (one buffer) and its torchtune import requires a
  // momentum above 0. 0.9 is the value of torch's own SGD example.
  double momentum = 0.9;
  double weight_decay = 0.0;
  bool master_weights = false;
};

class SgdMomentum final : public Optimizer {
 public:
  SgdMomentum(NamedParameters parameters, SgdOptions options);

  bool step(double grad_scale, bool check_finite) override;
  void zero_grad() override { weights_.zero_grad(); }
  int64_t steps_taken() const override { return steps_; }
  int64_t state_bytes() const override;
  std::string save() const override;
  void load(const std::string& bytes, const std::string& origin) override;

 private:
  // Each parameter's momentum buffer by name, for save and load.
  std::vector<StateTensors> state_tensors() const;
  UpdatedWeights weights_;
  std::vector<torch::Tensor> buffers_;
  // Per parameter: whether its buffer holds a value yet (torch creates it at
  // the first step the parameter has a gradient).
  std::vector<uint8_t> started_;
  SgdOptions options_;
  int64_t steps_ = 0;
};

}  // namespace headroom::executor
