// LibTorch modules for the Llama decoder the zoo describes (models/llama.h):
// fused RMSNorm, RoPE, grouped-query SDPA attention, SwiGLU, an untied or tied
// LM head and the causal-LM loss; optional LoRA adapters on named projections.
// Built from the same LlamaConfig as the planner's graph, and named as the
// graph's nodes ("model.layers.3.self_attn.q_proj"), so a Plan's block names
// ("model.layers.3") map onto modules. Only built with LibTorch.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "models/llama.h"
#include "models/torch/layers.h"
#include "models/torch/moe_module.h"

namespace headroom::models::torch_modules {

// RoPE tables [seq, head_dim] (cos, sin) with theta 500000 (Llama 3's rope_theta).
std::pair<torch::Tensor, torch::Tensor> llama_rope_tables(int64_t seq, int64_t head_dim,
                                                          torch::TensorOptions options);

// Decoder layer `index`: its MLP is the mixture of experts where the config
// makes the layer sparse (models::is_sparse_layer: Mixtral-style decoders),
// else SwiGLU.
class DecoderLayerImpl : public torch::nn::Module {
 public:
  explicit DecoderLayerImpl(const LlamaConfig& config, int64_t index = 0);
  torch::Tensor forward(const torch::Tensor& hidden, const torch::Tensor& cos, const torch::Tensor& sin);
  LlamaConfig config;
  RMSNorm input_layernorm{nullptr};
  RMSNorm post_attention_layernorm{nullptr};
  std::shared_ptr<torch::nn::Module> self_attn;
  std::shared_ptr<torch::nn::Module> mlp;
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  SparseMoeBlock moe{nullptr};  // registered as "mlp" in a sparse layer
};
TORCH_MODULE(DecoderLayer);

// The zoo's LoRA targets for Llama (models/zoo.cc).
LoraOptions llama_lora(int64_t rank, double alpha = 16);
// The zoo's LoRA targets for a mixture of experts: the attention projections.
// PEFT wraps nn.Linear modules by name; the router and the 3-D experts are
// parameters (models/hf_moe_families.cc), so no adapter goes on them.
LoraOptions moe_lora(int64_t rank, double alpha = 16);

class LlamaForCausalLMImpl : public torch::nn::Module {
 public:
  explicit LlamaForCausalLMImpl(const LlamaConfig& config, const LoraOptions& lora = {});
  // Mean next-token cross entropy of `input_ids` [B, S] (int64). Decoder layers
  // run through `runner` (block names "model.layers.<i>").
  torch::Tensor forward(const torch::Tensor& input_ids, const BlockRunner& runner = {});
  // The loss and the logits, as transformers' CausalLMOutput holds them: a
  // training loop that keeps the output keeps the logits alive through
  // backward, which is what the planner's graph counts (models/graph_builder.cc lm_loss).
  std::pair<torch::Tensor, torch::Tensor> loss_and_logits(const torch::Tensor& input_ids,
                                                          const BlockRunner& runner = {});
  LlamaConfig config;
  std::shared_ptr<torch::nn::Module> model;
  torch::nn::Embedding embed_tokens{nullptr};
  std::vector<DecoderLayer> layers;
  RMSNorm norm{nullptr};
  Linear lm_head{nullptr};
};
TORCH_MODULE(LlamaForCausalLM);

}  // namespace headroom::models::torch_modules
