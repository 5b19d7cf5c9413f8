#include "models/torch/llama_module.h"

namespace headroom::models::torch_modules {
namespace {

// rotate_half as in transformers' modeling_llama.py.
torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

int64_t head_dim_of(const LlamaConfig& c) { return c.head_dim > 0 ? c.head_dim : c.hidden / c.heads; }

}  // namespace

std::pair<torch::Tensor, torch::Tensor> llama_rope_tables(int64_t seq, int64_t head_dim,
                                                          torch::TensorOptions options) {
  const double theta = 500000.0;
  const auto inv_freq =
      torch::pow(theta, -torch::arange(0, head_dim, 2, options).div(static_cast<double>(head_dim)));
  const auto freqs = torch::outer(torch::arange(seq, options), inv_freq);
  const auto emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}

DecoderLayerImpl::DecoderLayerImpl(const LlamaConfig& c, int64_t index) : config(c) {
  const int64_t d = head_dim_of(c);
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden, 1e-5, c.rms_norm != RmsNormStyle::kFused));
  self_attn = register_module("self_attn", std::make_shared<torch::nn::Module>());
  q_proj = self_attn->register_module("q_proj", Linear(c.hidden, c.heads * d, c.qkv_bias));
  k_proj = self_attn->register_module("k_proj", Linear(c.hidden, c.kv_heads * d, c.qkv_bias));
  v_proj = self_attn->register_module("v_proj", Linear(c.hidden, c.kv_heads * d, c.qkv_bias));
  o_proj = self_attn->register_module("o_proj", Linear(c.heads * d, c.hidden, false));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden, 1e-5, c.rms_norm != RmsNormStyle::kFused));
  if (is_sparse_layer(c.moe, index)) {
    moe = register_module("mlp", SparseMoeBlock(c.moe, c.hidden));
    return;
  }
  mlp = register_module("mlp", std::make_shared<torch::nn::Module>());
  gate_proj = mlp->register_module("gate_proj", Linear(c.hidden, c.intermediate, false));
  up_proj = mlp->register_module("up_proj", Linear(c.hidden, c.intermediate, false));
  down_proj = mlp->register_module("down_proj", Linear(c.intermediate, c.hidden, false));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& hidden, const torch::Tensor& cos,
                                        const torch::Tensor& sin) {
  const int64_t batch = hidden.size(0);
  const int64_t seq = hidden.size(1);
  const int64_t d = head_dim_of(config);
  const auto x = input_layernorm(hidden);
  auto q = q_proj(x).view({batch, seq, config.heads, d}).transpose(1, 2);
  auto k = k_proj(x).view({batch, seq, config.kv_heads, d}).transpose(1, 2);
  const auto v = v_proj(x).view({batch, seq, config.kv_heads, d}).transpose(1, 2);
  // cos/sin never require grad: the products keep only them (shared by all layers).
  q = q * cos + rotate_half(q) * sin;
  k = k * cos + rotate_half(k) * sin;
  // Grouped k/v go to SDPA as they are (enable_gqa): no repeat_kv copies.
  auto attn = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true,
                                               /*scale=*/std::nullopt, /*enable_gqa=*/config.kv_heads != config.heads);
  attn = attn.transpose(1, 2).reshape({batch, seq, config.heads * d});
  const auto h = hidden + o_proj(attn);
  const auto y = post_attention_layernorm(h);
  if (!moe.is_empty()) return h + moe->forward(y);
  return h + down_proj(torch::silu(gate_proj(y)) * up_proj(y));
}

LoraOptions llama_lora(int64_t rank, double alpha) {
  LoraOptions lora;
  lora.rank = rank;
  lora.alpha = alpha;
  lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return lora;
}

LoraOptions moe_lora(int64_t rank, double alpha) {
  LoraOptions lora = llama_lora(rank, alpha);
  lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj"};
  return lora;
}

LlamaForCausalLMImpl::LlamaForCausalLMImpl(const LlamaConfig& c, const LoraOptions& lora) : config(c) {
  model = register_module("model", std::make_shared<torch::nn::Module>());
  embed_tokens = model->register_module("embed_tokens", torch::nn::Embedding(c.vocab, c.hidden));
  auto list = model->register_module("layers", std::make_shared<torch::nn::Module>());
  for (int64_t i = 0; i < c.layers; ++i) layers.push_back(list->register_module(std::to_string(i), DecoderLayer(c, i)));
  norm = model->register_module("norm", RMSNorm(c.hidden, 1e-5, c.rms_norm != RmsNormStyle::kFused));
  lm_head = register_module("lm_head", c.tie_embeddings ? Linear(embed_tokens->weight) : Linear(c.hidden, c.vocab, false));
  add_lora_adapters(*this, lora);
}

torch::Tensor LlamaForCausalLMImpl::forward(const torch::Tensor& input_ids, const BlockRunner& runner) {
  return loss_and_logits(input_ids, runner).first;
}

std::pair<torch::Tensor, torch::Tensor> LlamaForCausalLMImpl::loss_and_logits(const torch::Tensor& input_ids,
                                                                              const BlockRunner& runner) {
  const int64_t seq = input_ids.size(1);
  // The embeddings and the head run through the runner too, under the graph's
  // block names (ZeRO-3 gathers their parameters around them).
  auto embed = embed_tokens;
  torch::Tensor hidden = run_block(runner, "embeddings", *embed_tokens, [embed](const std::vector<torch::Tensor>& in) mutable {
    return std::vector<torch::Tensor>{embed(in[0])};
  }, {input_ids})[0];
  const auto [cos, sin] = llama_rope_tables(seq, head_dim_of(config), hidden.options().requires_grad(false));
  for (size_t i = 0; i < layers.size(); ++i) {
    DecoderLayer layer = layers[i];  // held by the block function for a recomputing backward
    const BlockFn fn = [layer](const std::vector<torch::Tensor>& in) mutable {
      return std::vector<torch::Tensor>{layer->forward(in[0], in[1], in[2])};
    };
    hidden = run_block(runner, "model.layers." + std::to_string(i), *layer, fn, {hidden, cos, sin})[0];
  }
  auto head_norm = norm;
  auto head = lm_head;
  const auto logits = run_block(runner, "head", *lm_head, [head_norm, head](const std::vector<torch::Tensor>& in) mutable {
    return std::vector<torch::Tensor>{head(head_norm(in[0]))};
  }, {hidden})[0];
  // transformers ForCausalLMLoss: shift the labels, not the logits (no copy of
  // the logits): position t predicts token t+1, the last position is ignored.
  const auto labels = torch::constant_pad_nd(input_ids.narrow(1, 1, seq - 1), {0, 1}, -100).reshape({-1});
  // transformers' ForCausalLMLoss upcasts first (logits.float()): the log-softmax
  // it keeps is f32 whatever the compute dtype.
  return {torch::nn::functional::cross_entropy(logits.view({-1, config.vocab}).to(torch::kFloat), labels,
                                               torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100)),
          logits};
}

}  // namespace headroom::models::torch_modules
