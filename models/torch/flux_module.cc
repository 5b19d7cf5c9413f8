#include "models/torch/flux_module.h"

#include <cmath>
#include <string>

namespace headroom::models::torch_modules {
namespace {

namespace F = torch::nn::functional;

// Registers `module` under a dotted path ("attn.to_out.0"), creating empty
// parent modules as needed, so parameter names match diffusers'.
template <typename M>
M nested(torch::nn::Module& root, const std::string& path, M module) {
  torch::nn::Module* parent = &root;
  size_t start = 0;
  for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', start)) {
    const std::string name = path.substr(start, dot - start);
    std::shared_ptr<torch::nn::Module> child;
    for (const auto& item : parent->named_children()) {
      if (item.key() == name) child = item.value();
    }
    if (!child) child = parent->register_module(name, std::make_shared<torch::nn::Module>());
    parent = child.get();
    start = dot + 1;
  }
  return parent->register_module(path.substr(start), module);
}

// `norm` (a LayerNorm without affine, eps 1e-6), then x * (1 + scale) + shift per sample.
torch::Tensor modulate(LayerNorm& norm, const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale) {
  return norm(x) * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1);
}

// diffusers apply_rotary_emb with use_real_unbind_dim=-1: pairs (x0, x1) rotate
// to (-x1, x0), in fp32 against the fp32 tables and cast back,
// (x.float() * cos + x_rotated.float() * sin).to(x.dtype): the multiplies keep
// the shared tables, not a copy per call. x is [B, tokens, heads, D]; cos/sin
// are [tokens, D].
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const auto pairs = x.unflatten(-1, {-1, 2}).unbind(-1);
  const torch::Tensor rotated = torch::stack({-pairs[1], pairs[0]}, -1).flatten(-2);
  const auto c = cos.unsqueeze(1);
  const auto s = sin.unsqueeze(1);
  return (x.to(torch::kFloat) * c + rotated.to(torch::kFloat) * s).to(x.scalar_type());
}

// Joint attention over [B, tokens, heads, D] q, k, v; returns [B, tokens, hidden].
torch::Tensor joint_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const auto out = at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2));
  return out.transpose(1, 2).flatten(2);
}

// diffusers get_timestep_embedding(flip_sin_to_cos=True, downscale_freq_shift=0).
torch::Tensor timestep_embedding(const torch::Tensor& t, int64_t channels) {
  const int64_t half = channels / 2;
  const auto exponent = torch::arange(half, t.options()) * (-std::log(10000.0) / static_cast<double>(half));
  const auto args = t.unsqueeze(1) * torch::exp(exponent).unsqueeze(0);
  return torch::cat({torch::cos(args), torch::sin(args)}, -1);
}

torch::Tensor silu_mlp(Linear& first, Linear& second, const torch::Tensor& x) { return second(torch::silu(first(x))); }

}  // namespace

FluxBatch synthetic_flux_batch(const FluxConfig& c, int64_t batch, int64_t image_tokens) {
  FluxBatch b;
  const auto x0 = torch::randn({batch, image_tokens, c.in_channels});
  const auto noise = torch::randn({batch, image_tokens, c.in_channels});
  b.timestep = torch::rand({batch});
  const auto t = b.timestep.view({batch, 1, 1});
  b.hidden_states = (1 - t) * x0 + t * noise;
  b.target = noise - x0;
  b.encoder_hidden_states = torch::randn({batch, c.text_tokens, c.joint_dim});
  b.pooled_projections = torch::randn({batch, c.pooled_dim});
  b.guidance = torch::full({batch}, 3.5);
  return b;
}

std::pair<torch::Tensor, torch::Tensor> flux_rope_tables(int64_t tokens, int64_t head_dim, torch::Device device) {
  const auto options = torch::TensorOptions().dtype(torch::kFloat).device(device);
  const auto inv_freq = torch::pow(10000.0, -torch::arange(0, head_dim, 2, options) / static_cast<double>(head_dim));
  const auto freqs = torch::outer(torch::arange(tokens, options), inv_freq).repeat_interleave(2, -1);
  return {freqs.cos(), freqs.sin()};
}

ModulationImpl::ModulationImpl(int64_t hidden, int64_t n) : chunks(n) {
  linear = register_module("linear", Linear(hidden, n * hidden, true));
  norm = register_module("norm", LayerNorm(hidden, 1e-6, false));
}

std::vector<torch::Tensor> ModulationImpl::forward(const torch::Tensor& temb) {
  return linear(torch::silu(temb)).chunk(chunks, 1);
}

FeedForwardImpl::FeedForwardImpl(int64_t hidden, int64_t mlp) {
  proj = nested(*this, "net.0.proj", Linear(hidden, mlp, true));
  out = nested(*this, "net.2", Linear(mlp, hidden, true));
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  return out(F::gelu(proj(x), F::GELUFuncOptions().approximate("tanh")));
}

DoubleStreamBlockImpl::DoubleStreamBlockImpl(const FluxConfig& c) : config(c) {
  const int64_t h = c.hidden;
  norm1 = register_module("norm1", Modulation(h, 6));
  norm1_context = register_module("norm1_context", Modulation(h, 6));
  to_q = nested(*this, "attn.to_q", Linear(h, h, true));
  to_k = nested(*this, "attn.to_k", Linear(h, h, true));
  to_v = nested(*this, "attn.to_v", Linear(h, h, true));
  norm_q = nested(*this, "attn.norm_q", RMSNorm(c.head_dim, 1e-6));
  norm_k = nested(*this, "attn.norm_k", RMSNorm(c.head_dim, 1e-6));
  add_q_proj = nested(*this, "attn.add_q_proj", Linear(h, h, true));
  add_k_proj = nested(*this, "attn.add_k_proj", Linear(h, h, true));
  add_v_proj = nested(*this, "attn.add_v_proj", Linear(h, h, true));
  norm_added_q = nested(*this, "attn.norm_added_q", RMSNorm(c.head_dim, 1e-6));
  norm_added_k = nested(*this, "attn.norm_added_k", RMSNorm(c.head_dim, 1e-6));
  to_out = nested(*this, "attn.to_out.0", Linear(h, h, true));
  to_add_out = nested(*this, "attn.to_add_out", Linear(h, h, true));
  norm2 = register_module("norm2", LayerNorm(h, 1e-6, false));
  ff = register_module("ff", FeedForward(h, c.mlp));
  norm2_context = register_module("norm2_context", LayerNorm(h, 1e-6, false));
  ff_context = register_module("ff_context", FeedForward(h, c.mlp));
}

std::vector<torch::Tensor> DoubleStreamBlockImpl::forward(const std::vector<torch::Tensor>& in) {
  const torch::Tensor& img = in[0];
  const torch::Tensor& txt = in[1];
  const torch::Tensor& temb = in[2];
  const int64_t b = img.size(0);
  const int64_t text_tokens = txt.size(1);
  const auto im = norm1(temb);  // shift, scale, gate (attention); shift, scale, gate (MLP)
  const auto tm = norm1_context(temb);
  const auto img_x = modulate(norm1->norm, img, im[0], im[1]);
  const auto txt_x = modulate(norm1_context->norm, txt, tm[0], tm[1]);
  const auto heads = [&](Linear& proj, const torch::Tensor& x) {
    return proj(x).view({b, x.size(1), config.heads, config.head_dim});
  };
  const auto q = torch::cat({norm_added_q(heads(add_q_proj, txt_x)), norm_q(heads(to_q, img_x))}, 1);
  const auto k = torch::cat({norm_added_k(heads(add_k_proj, txt_x)), norm_k(heads(to_k, img_x))}, 1);
  const auto v = torch::cat({heads(add_v_proj, txt_x), heads(to_v, img_x)}, 1);
  const auto o = joint_attention(rope(q, in[3], in[4]), rope(k, in[3], in[4]), v);
  const auto txt_o = to_add_out(o.narrow(1, 0, text_tokens));
  const auto img_o = to_out(o.narrow(1, text_tokens, img.size(1)));
  auto img_h = img + im[2].unsqueeze(1) * img_o;
  auto txt_h = txt + tm[2].unsqueeze(1) * txt_o;
  img_h = img_h + im[5].unsqueeze(1) * ff(modulate(norm2, img_h, im[3], im[4]));
  txt_h = txt_h + tm[5].unsqueeze(1) * ff_context(modulate(norm2_context, txt_h, tm[3], tm[4]));
  return {img_h, txt_h};
}

SingleStreamBlockImpl::SingleStreamBlockImpl(const FluxConfig& c) : config(c) {
  const int64_t h = c.hidden;
  norm = register_module("norm", Modulation(h, 3));
  proj_mlp = register_module("proj_mlp", Linear(h, c.mlp, true));
  to_q = nested(*this, "attn.to_q", Linear(h, h, true));
  to_k = nested(*this, "attn.to_k", Linear(h, h, true));
  to_v = nested(*this, "attn.to_v", Linear(h, h, true));
  norm_q = nested(*this, "attn.norm_q", RMSNorm(c.head_dim, 1e-6));
  norm_k = nested(*this, "attn.norm_k", RMSNorm(c.head_dim, 1e-6));
  proj_out = register_module("proj_out", Linear(h + c.mlp, h, true));
}

std::vector<torch::Tensor> SingleStreamBlockImpl::forward(const std::vector<torch::Tensor>& in) {
  const torch::Tensor& img = in[0];
  const torch::Tensor& txt = in[1];
  const int64_t b = img.size(0);
  const auto joint = torch::cat({txt, img}, 1);
  const int64_t tokens = joint.size(1);
  const auto mod = norm(in[2]);  // shift, scale, gate
  const auto x = modulate(norm->norm, joint, mod[0], mod[1]);
  const auto mlp = F::gelu(proj_mlp(x), F::GELUFuncOptions().approximate("tanh"));
  const auto heads = [&](Linear& proj) { return proj(x).view({b, tokens, config.heads, config.head_dim}); };
  const auto o = joint_attention(rope(norm_q(heads(to_q)), in[3], in[4]), rope(norm_k(heads(to_k)), in[3], in[4]),
                                 heads(to_v));
  const auto h = joint + mod[2].unsqueeze(1) * proj_out(torch::cat({o, mlp}, 2));
  return {h.narrow(1, txt.size(1), img.size(1)), h.narrow(1, 0, txt.size(1))};
}

LoraOptions flux_lora(int64_t rank, double alpha) {
  LoraOptions lora;
  lora.rank = rank;
  lora.alpha = alpha;
  lora.targets = {"to_q", "to_k", "to_v", "to_out.0"};
  return lora;
}

FluxTransformerImpl::FluxTransformerImpl(const FluxConfig& c, const LoraOptions& lora) : config(c) {
  const int64_t h = c.hidden;
  time_1 = nested(*this, "time_text_embed.timestep_embedder.linear_1", Linear(c.time_channels, h, true));
  time_2 = nested(*this, "time_text_embed.timestep_embedder.linear_2", Linear(h, h, true));
  guidance_1 = nested(*this, "time_text_embed.guidance_embedder.linear_1", Linear(c.time_channels, h, true));
  guidance_2 = nested(*this, "time_text_embed.guidance_embedder.linear_2", Linear(h, h, true));
  text_1 = nested(*this, "time_text_embed.text_embedder.linear_1", Linear(c.pooled_dim, h, true));
  text_2 = nested(*this, "time_text_embed.text_embedder.linear_2", Linear(h, h, true));
  x_embedder = register_module("x_embedder", Linear(c.in_channels, h, true));
  context_embedder = register_module("context_embedder", Linear(c.joint_dim, h, true));
  for (int64_t i = 0; i < c.double_blocks; ++i) {
    transformer_blocks.push_back(nested(*this, "transformer_blocks." + std::to_string(i), DoubleStreamBlock(c)));
  }
  for (int64_t i = 0; i < c.single_blocks; ++i) {
    single_transformer_blocks.push_back(
        nested(*this, "single_transformer_blocks." + std::to_string(i), SingleStreamBlock(c)));
  }
  norm_out = register_module("norm_out", Modulation(h, 2));
  proj_out = register_module("proj_out", Linear(h, c.in_channels, true));
  add_lora_adapters(*this, lora);
}

std::vector<torch::Tensor> FluxTransformerImpl::embed(const FluxBatch& batch) {
  // Flux scales t and guidance by 1000 before the sinusoidal projection.
  const auto t = timestep_embedding(batch.timestep * 1000, config.time_channels);
  const auto g = timestep_embedding(batch.guidance * 1000, config.time_channels);
  const auto temb = silu_mlp(time_1, time_2, t) + silu_mlp(guidance_1, guidance_2, g) +
                    silu_mlp(text_1, text_2, batch.pooled_projections);
  const auto [cos, sin] =
      flux_rope_tables(config.text_tokens + batch.hidden_states.size(1), config.head_dim, batch.hidden_states.device());
  return {x_embedder(batch.hidden_states), context_embedder(batch.encoder_hidden_states), temb, cos, sin};
}

torch::Tensor FluxTransformerImpl::forward(const FluxBatch& batch, const BlockRunner& runner) {
  // The embeddings and the head run through the runner too, under the graph's
  // block names (ZeRO-3 gathers their parameters around them).
  const auto e = run_block(runner, "embeddings", *this, [this, &batch](const std::vector<torch::Tensor>&) {
    return embed(batch);
  }, {batch.hidden_states, batch.encoder_hidden_states, batch.pooled_projections, batch.timestep, batch.guidance});
  torch::Tensor img = e[0];
  torch::Tensor txt = e[1];
  const auto run = [&](const std::string& name, auto block) {
    const BlockFn fn = [block](const std::vector<torch::Tensor>& in) mutable { return block->forward(in); };
    const auto out = run_block(runner, name, *block, fn, {img, txt, e[2], e[3], e[4]});
    img = out[0];
    txt = out[1];
  };
  for (size_t i = 0; i < transformer_blocks.size(); ++i) {
    run("transformer_blocks." + std::to_string(i), transformer_blocks[i]);
  }
  for (size_t i = 0; i < single_transformer_blocks.size(); ++i) {
    run("single_transformer_blocks." + std::to_string(i), single_transformer_blocks[i]);
  }
  // AdaLayerNormContinuous: scale first, then shift.
  const auto prediction = run_block(runner, "head", *this, [this](const std::vector<torch::Tensor>& in) {
    const auto mod = norm_out(in[1]);
    return std::vector<torch::Tensor>{proj_out(modulate(norm_out->norm, in[0], mod[1], mod[0]))};
  }, {img, e[2]})[0];
  return F::mse_loss(prediction, batch.target);
}

}  // namespace headroom::models::torch_modules
