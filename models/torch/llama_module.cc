#include "models/torch/llama_module.h"

#include <cmath>

namespace headroom::models::torch_modules {
namespace {

// rotate_half as in transformers' modeling_llama.py.
torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// RoPE tables [S, head_dim] with theta 500000 (Llama 3's rope_theta).
std::pair<torch::Tensor, torch::Tensor> rope_tables(int64_t seq, int64_t head_dim, torch::TensorOptions options) {
  const double theta = 500000.0;
  auto inv_freq = torch::pow(theta, -torch::arange(0, head_dim, 2, options).div(static_cast<double>(head_dim)));
  auto positions = torch::arange(seq, options);
  auto freqs = torch::outer(positions, inv_freq);
  auto emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}

int64_t head_dim_of(const LlamaConfig& c) { return c.head_dim > 0 ? c.head_dim : c.hidden / c.heads; }

}  // namespace

LinearImpl::LinearImpl(int64_t in, int64_t out, bool with_bias) {
  weight = register_parameter("weight", torch::empty({out, in}));
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (with_bias) bias = register_parameter("bias", torch::zeros({out}));
}

void LinearImpl::add_lora(int64_t rank, double alpha) {
  // Submodules, so the names read "....q_proj.lora_A.weight" as in PEFT checkpoints.
  lora_a = register_module("lora_A", std::make_shared<torch::nn::Module>())
               ->register_parameter("weight", torch::empty({rank, weight.size(1)}));
  torch::nn::init::kaiming_uniform_(lora_a, std::sqrt(5.0));
  lora_b = register_module("lora_B", std::make_shared<torch::nn::Module>())
               ->register_parameter("weight", torch::zeros({weight.size(0), rank}));
  lora_scale = alpha / static_cast<double>(rank);
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = torch::nn::functional::linear(x, weight, bias);
  if (lora_a.defined()) y = y + torch::nn::functional::linear(torch::nn::functional::linear(x, lora_a), lora_b) * lora_scale;
  return y;
}

RMSNormImpl::RMSNormImpl(int64_t width, double epsilon) : eps(epsilon) {
  weight = register_parameter("weight", torch::ones({width}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  const auto variance = x.pow(2).mean(-1, true);
  return weight * (x * torch::rsqrt(variance + eps));
}

DecoderLayerImpl::DecoderLayerImpl(const LlamaConfig& c) : config(c) {
  const int64_t d = head_dim_of(c);
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden));
  self_attn = register_module("self_attn", std::make_shared<torch::nn::Module>());
  q_proj = self_attn->register_module("q_proj", Linear(c.hidden, c.heads * d, c.qkv_bias));
  k_proj = self_attn->register_module("k_proj", Linear(c.hidden, c.kv_heads * d, c.qkv_bias));
  v_proj = self_attn->register_module("v_proj", Linear(c.hidden, c.kv_heads * d, c.qkv_bias));
  o_proj = self_attn->register_module("o_proj", Linear(c.heads * d, c.hidden, false));
  mlp = register_module("mlp", std::make_shared<torch::nn::Module>());
  gate_proj = mlp->register_module("gate_proj", Linear(c.hidden, c.intermediate, false));
  up_proj = mlp->register_module("up_proj", Linear(c.hidden, c.intermediate, false));
  down_proj = mlp->register_module("down_proj", Linear(c.intermediate, c.hidden, false));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& hidden, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t batch = hidden.size(0);
  const int64_t seq = hidden.size(1);
  const int64_t d = head_dim_of(config);
  const auto x = input_layernorm(hidden);
  auto q = q_proj(x).view({batch, seq, config.heads, d}).transpose(1, 2);
  auto k = k_proj(x).view({batch, seq, config.kv_heads, d}).transpose(1, 2);
  auto v = v_proj(x).view({batch, seq, config.kv_heads, d}).transpose(1, 2);
  q = q * cos + rotate_half(q) * sin;
  k = k * cos + rotate_half(k) * sin;
  const int64_t groups = config.heads / config.kv_heads;
  if (groups > 1) {
    k = k.repeat_interleave(groups, 1);
    v = v.repeat_interleave(groups, 1);
  }
  auto attn = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true);
  attn = attn.transpose(1, 2).reshape({batch, seq, config.heads * d});
  auto h = hidden + o_proj(attn);
  const auto y = post_attention_layernorm(h);
  return h + down_proj(torch::silu(gate_proj(y)) * up_proj(y));
}

LlamaForCausalLMImpl::LlamaForCausalLMImpl(const LlamaConfig& c, const LoraOptions& lora) : config(c) {
  model = register_module("model", std::make_shared<torch::nn::Module>());
  embed_tokens = model->register_module("embed_tokens", torch::nn::Embedding(c.vocab, c.hidden));
  auto list = model->register_module("layers", std::make_shared<torch::nn::Module>());
  for (int64_t i = 0; i < c.layers; ++i) {
    layers.push_back(list->register_module(std::to_string(i), DecoderLayer(c)));
  }
  norm = model->register_module("norm", RMSNorm(c.hidden));
  lm_head = register_module("lm_head", Linear(c.hidden, c.vocab, false));
  if (c.tie_embeddings) lm_head->weight = embed_tokens->weight;
  if (lora.rank > 0) {
    for (DecoderLayer& layer : layers) {
      for (auto& [name, linear] : std::vector<std::pair<std::string, Linear*>>{
               {"q_proj", &layer->q_proj}, {"k_proj", &layer->k_proj}, {"v_proj", &layer->v_proj},
               {"o_proj", &layer->o_proj}, {"gate_proj", &layer->gate_proj}, {"up_proj", &layer->up_proj},
               {"down_proj", &layer->down_proj}}) {
        if (lora.targets.count(name)) (*linear)->add_lora(lora.rank, lora.alpha);
      }
    }
  }
}

void LlamaForCausalLMImpl::freeze_base() {
  for (auto& item : named_parameters()) {
    const bool adapter = item.key().find("lora_") != std::string::npos;
    item.value().set_requires_grad(adapter);
  }
}

torch::Tensor LlamaForCausalLMImpl::forward(const torch::Tensor& input_ids, const std::set<int>& checkpointed,
                                            const Checkpointer& checkpointer) {
  const int64_t seq = input_ids.size(1);
  auto hidden = embed_tokens(input_ids);
  const auto [cos, sin] = rope_tables(seq, head_dim_of(config), hidden.options().requires_grad(false));
  for (size_t i = 0; i < layers.size(); ++i) {
    if (checkpointed.count(static_cast<int>(i)) && checkpointer) {
      hidden = checkpointer(layers[i], hidden, cos, sin);
    } else {
      hidden = layers[i]->forward(hidden, cos, sin);
    }
  }
  const auto logits = lm_head(norm(hidden));
  // Next-token prediction: position t predicts token t+1.
  const auto shifted = logits.narrow(1, 0, seq - 1).reshape({-1, config.vocab});
  const auto targets = input_ids.narrow(1, 1, seq - 1).reshape({-1});
  return torch::nn::functional::cross_entropy(shifted, targets);
}

}  // namespace headroom::models::torch_modules
