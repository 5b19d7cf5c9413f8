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
#include <memory>
#include <string>
#include <vector>

#include "graph/layer_graph.h"
#include "models/moe.h"

namespace headroom::models::torch_modules {

// torch._grouped_mm(x, weight.transpose(-2, -1), offs=offsets) as one autograd
// node: x [S, in] holds rows sorted by expert, expert e's rows ending at
// offsets[e] (int32 [E], cumulative), weight [E, out, in]; returns [S, out].
// It keeps x only for the weight's gradient (a frozen expert keeps nothing of
// it), the weight only for x's, and the offsets, as the graph's grouped_mm
// node says (models/moe.cc grouped_mm).
torch::Tensor grouped_mm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& offsets);

// PEFT's LoRA on one of the block's parameters (lora.ParamWrapper, peft 0.21.2;
// planner/mechanisms/peft_param_wrapper.h): lora_A [E r, in], lora_B [out, r E]
// (a 2-D router weight: [r, in] and [out, r]).
struct ParamLora {
  torch::Tensor a;
  torch::Tensor b;
  double scale = 0;  // lora_alpha / r
  bool defined() const { return a.defined(); }
};

class SparseMoeBlockImpl : public torch::nn::Module {
 public:
  SparseMoeBlockImpl(const MoeSpec& spec, int64_t hidden);
  // x [..., hidden] -> the routed experts' weighted sum, same shape and dtype.
  torch::Tensor forward(const torch::Tensor& x);
  // Adapters on "experts.gate_up_proj", "experts.down_proj" or "gate" (the router),
  // named "<that>.lora_A.weight" and "<that>.lora_B.weight" as PEFT names them;
  // lora_A as nn.Linear's default init, lora_B zeros.
  void wrap(const std::string& which, int64_t rank, double scale);
  MoeSpec spec;
  torch::Tensor router;        // "gate.weight" [E, hidden]: an nn.Parameter, not an nn.Linear
  torch::Tensor gate_up_proj;  // "experts.gate_up_proj" [E, 2 I, hidden]
  torch::Tensor down_proj;     // "experts.down_proj" [E, hidden, I]
  ParamLora router_lora, gate_up_lora, down_lora;
  // Rows each expert got in the latest forward (host memory: never an activation).
  std::vector<int64_t> last_counts;

 private:
  std::shared_ptr<torch::nn::Module> gate_, experts_;
};
TORCH_MODULE(SparseMoeBlock);

// Wraps, in every SparseMoeBlock under `root`, the parameters the planner's trained
// `graph` gave ParamWrapper adapters (a "<node>.lora_A.weight" on the experts' or the
// router's node), at the graph's rank; returns how many.
int wrap_param_lora(torch::nn::Module& root, const graph::LayerGraph& graph, double scale);

}  // namespace headroom::models::torch_modules
