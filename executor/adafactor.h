// Adafactor as torch.optim.Adafactor does it (torch 2.11,
// torch/optim/_adafactor.py, _single_tensor_adafactor): no first moment; for a
// tensor of 2 or more dimensions a row factor (shape[-1] = 1) and a column
// factor (shape[-2] = 1) of the second moment, for a vector a full one;
// beta2_t = 1 - t^beta2_decay, rho_t = min(lr, 1/sqrt(t)), the step scaled by
// max(eps2, RMS(p)) and the update clipped to RMS d; decoupled weight decay
// p *= 1 - lr * weight_decay. States are fp32 (beside fp32 master weights
// under mixed precision, as torch keeps them for fp32 parameters). Under pure
// bf16 they stay fp32 too, as transformers' Adafactor keeps them (it upcasts
// grad and parameter): the layout the planner prices (planner/memory/model_states.cc,
// kAdafactor), where torch.optim.Adafactor on a bf16 parameter would keep bf16
// states. The update is then computed in fp32 and rounded into the parameter.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "executor/optimizer.h"

namespace headroom::executor {

struct AdafactorOptions {
  double lr = 1e-2;  // torch's default; also the cap on rho_t and the decay's factor
  double beta2_decay = -0.8;
  std::optional<double> eps1;  // nullopt: torch.finfo(parameter dtype).eps, as torch
  double eps2 = 1e-3;
  double d = 1.0;  // clipping threshold on the update's RMS
  double weight_decay = 0.0;
  bool master_weights = false;
};

class Adafactor final : public Optimizer {
 public:
  Adafactor(NamedParameters parameters, AdafactorOptions options);

  bool step(double grad_scale, bool check_finite) override;
  void zero_grad() override { weights_.zero_grad(); }
  int64_t steps_taken() const override { return steps_; }
  int64_t state_bytes() const override;
  std::string save() const override;
  void load(const std::string& bytes, const std::string& origin) override;

 private:
  struct State {
    torch::Tensor row_var;   // >= 2-D: shape with the last dim 1
    torch::Tensor col_var;   // >= 2-D: shape with the second-to-last dim 1
    torch::Tensor variance;  // vectors (and scalars): the full second moment
    double eps1 = 0;
  };
  void update(size_t i, const torch::Tensor& grad, double step);
  // Each parameter's states by name, for save and load.
  std::vector<StateTensors> state_tensors() const;
  UpdatedWeights weights_;
  std::vector<State> states_;
  AdafactorOptions options_;
  int64_t steps_ = 0;
};

}  // namespace headroom::executor
