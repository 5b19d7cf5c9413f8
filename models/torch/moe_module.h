// The sparse mixture-of-experts MLP of a decoder layer as LibTorch modules,
// computing what the planner's graph of it says (models/moe.cc, after
// transformers 5.23.0's <Family>TopKRouter and grouped_mm_experts_forward in
// integrations/moe.py): a top-k router with an f32 softmax, the T x k routed
// rows sorted by expert through one grouped GEMM for gate_up and one for down,
// the routing weights, back to token order, summed over k. Named as the
// graph's parameters ("model.layers.3.mlp.gate.weight",
// "model.layers.3.mlp.experts.gate_up_proj"). Only built with LibTorch.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "models/moe.h"

namespace headroom::models::torch_modules {

// torch._grouped_mm(x, weight.transpose(-2, -1), offs=offsets) as one autograd
// node: x [S, in] holds rows sorted by expert, expert e's rows ending at
// offsets[e] (int32 [E], cumulative), weight [E, out, in]; returns [S, out].
// It keeps x only for the weight's gradient (a frozen expert keeps nothing of
// it), the weight only for x's, and the offsets, as the graph's grouped_mm
// node says (models/moe.cc grouped_mm).
torch::Tensor grouped_mm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& offsets);

class SparseMoeBlockImpl : public torch::nn::Module {
 public:
  SparseMoeBlockImpl(const MoeSpec& spec, int64_t hidden);
  // x [..., hidden] -> the routed experts' weighted sum, same shape and dtype.
  torch::Tensor forward(const torch::Tensor& x);
  MoeSpec spec;
  torch::Tensor router;        // "gate.weight" [E, hidden]: an nn.Parameter, not an nn.Linear
  torch::Tensor gate_up_proj;  // "experts.gate_up_proj" [E, 2 I, hidden]
  torch::Tensor down_proj;     // "experts.down_proj" [E, hidden, I]
  // Rows each expert got in the latest forward (host memory: never an activation).
  std::vector<int64_t> last_counts;
};
TORCH_MODULE(SparseMoeBlock);

}  // namespace headroom::models::torch_modules
