// LibTorch modules for the Llama decoder the zoo describes (models/llama.h):
// RMSNorm, RoPE, grouped-query SDPA attention, SwiGLU, an untied or tied LM
// head and the causal-LM loss; optional LoRA adapters on named projections.
// Built from the same LlamaConfig as the planner's graph, and named as the
// graph's nodes ("model.layers.3.self_attn.q_proj"), so a Plan's block names
// map onto modules. Only built with LibTorch (executor/).
#pragma once

#include <torch/torch.h>

#include <set>
#include <string>
#include <vector>

#include "models/llama.h"

namespace headroom::models::torch_modules {

// nn.Linear without bias plus an optional PEFT-style adapter: y = W x + B(A x) * alpha / r,
// A [r, in] Kaiming-uniform, B [out, r] zero, so a fresh adapter changes nothing.
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in, int64_t out, bool bias);
  void add_lora(int64_t rank, double alpha);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  torch::Tensor bias;
  torch::Tensor lora_a;
  torch::Tensor lora_b;
  double lora_scale = 0;
};
TORCH_MODULE(Linear);

class RMSNormImpl : public torch::nn::Module {
 public:
  explicit RMSNormImpl(int64_t width, double eps = 1e-5);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  explicit DecoderLayerImpl(const LlamaConfig& config);
  torch::Tensor forward(const torch::Tensor& hidden, const torch::Tensor& cos, const torch::Tensor& sin);
  LlamaConfig config;
  RMSNorm input_layernorm{nullptr};
  RMSNorm post_attention_layernorm{nullptr};
  std::shared_ptr<torch::nn::Module> self_attn;
  std::shared_ptr<torch::nn::Module> mlp;
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(DecoderLayer);

struct LoraOptions {
  int64_t rank = 0;  // 0: no adapters
  double alpha = 16;
  std::set<std::string> targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
};

class LlamaForCausalLMImpl : public torch::nn::Module {
 public:
  LlamaForCausalLMImpl(const LlamaConfig& config, const LoraOptions& lora = {});
  // Mean cross-entropy of next-token prediction. Layers whose index is in
  // `checkpointed` run through executor::checkpoint (passed in, so this
  // library does not depend on the executor).
  using Checkpointer = std::function<torch::Tensor(DecoderLayer&, const torch::Tensor&, const torch::Tensor&,
                                                   const torch::Tensor&)>;
  torch::Tensor forward(const torch::Tensor& input_ids, const std::set<int>& checkpointed = {},
                        const Checkpointer& checkpointer = {});
  // Freezes every base weight (LoRA/QLoRA-style training): only adapters train.
  void freeze_base();
  LlamaConfig config;
  std::shared_ptr<torch::nn::Module> model;
  torch::nn::Embedding embed_tokens{nullptr};
  std::vector<DecoderLayer> layers;
  RMSNorm norm{nullptr};
  Linear lm_head{nullptr};
};
TORCH_MODULE(LlamaForCausalLM);

}  // namespace headroom::models::torch_modules
