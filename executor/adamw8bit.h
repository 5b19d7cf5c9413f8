// bitsandbytes' AdamW8bit (bitsandbytes/optim/adamw.py, Optimizer2State in
// optim/optimizer.py; the update of backends/cpu/ops.py,
// _optimizer_update_8bit_blockwise_cpu), with LibTorch ops so it runs on any
// device. For a parameter of at least min_8bit_size = 4096 elements each
// moment is stored as one uint8 code per element in the dynamic quantization
// map (signed for exp_avg, unsigned for exp_avg_sq: functional.py
// create_dynamic_map) and one fp32 absmax per block of 256 (blocksize since
// bitsandbytes 0.44.0); a step dequantizes, updates in fp32 as AdamW does and
// quantizes again (backends/default/ops.py quantize_blockwise: nearest code by
// midpoints). Smaller parameters keep two fp32 states and the 32-bit update
// (_optimizer_update_32bit_cpu). Bytes per parameter: 2n + 2 * 4 * ceil(n/256),
// or 8n under 4096, plus fp32 master weights under mixed precision: what the
// planner counts (planner/memory/model_states.cc, kAdamW8bit).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "executor/cpu_adamw.h"
#include "executor/optimizer.h"
#include "models/torch/blockwise_quant.h"

namespace headroom::executor {

// bitsandbytes' blockwise quantization, as its default (torch) backend does it.
namespace bnb {

inline constexpr int64_t kBlockSize = 256;       // optim/optimizer.py init_state, backends/cpu/ops.py
inline constexpr int64_t kMin8bitSize = 4096;    // Optimizer2State min_8bit_size default

// The quantization itself is models/torch/blockwise_quant.h, shared with
// QLoRA's double quantization; here with the optimizers' block of 256.
using models::torch_modules::dynamic_map;
inline std::pair<torch::Tensor, torch::Tensor> quantize_blockwise(const torch::Tensor& x, const torch::Tensor& code,
                                                                  int64_t block_size = kBlockSize) {
  return models::torch_modules::quantize_blockwise(x, code, block_size);
}
inline torch::Tensor dequantize_blockwise(const torch::Tensor& codes, const torch::Tensor& absmax,
                                          const torch::Tensor& code, int64_t block_size = kBlockSize) {
  return models::torch_modules::dequantize_blockwise(codes, absmax, code, block_size);
}

}  // namespace bnb

struct AdamW8bitOptions {
  AdamWHyper hyper;  // lr, betas (0.9, 0.999), eps 1e-8, weight_decay as AdamW8bit's
  bool master_weights = false;
  int64_t min_8bit_size = bnb::kMin8bitSize;
};

class AdamW8bit final : public Optimizer {
 public:
  AdamW8bit(NamedParameters parameters, AdamW8bitOptions options);

  bool step(double grad_scale, bool check_finite) override;
  void zero_grad() override { weights_.zero_grad(); }
  int64_t steps_taken() const override { return steps_; }
  int64_t state_bytes() const override;
  std::string save() const override;
  void load(const std::string& bytes, const std::string& origin) override;

  // The moments of parameter i in fp32 (dequantized when 8-bit), for tests.
  std::pair<torch::Tensor, torch::Tensor> moments(size_t i) const;
  bool quantized(size_t i) const { return states_[i].absmax1.defined(); }

 private:
  struct State {
    torch::Tensor state1;  // exp_avg: uint8 codes, or fp32 under min_8bit_size
    torch::Tensor state2;  // exp_avg_sq
    torch::Tensor absmax1;  // fp32, one per block, when quantized
    torch::Tensor absmax2;
  };
  void update_quantized(State& s, torch::Tensor& weights, const torch::Tensor& grad) const;
  // Each parameter's states by name, for save and load.
  std::vector<StateTensors> state_tensors() const;
  void update_32bit(State& s, torch::Tensor& weights, const torch::Tensor& grad) const;
  UpdatedWeights weights_;
  std::vector<State> states_;
  torch::Tensor qmap1_;  // signed dynamic map (exp_avg), on the parameters' device
  torch::Tensor qmap2_;  // unsigned dynamic map (exp_avg_sq)
  AdamW8bitOptions options_;
  int64_t steps_ = 0;
};

}  // namespace headroom::executor
