#include "models/torch/clip_tower.h"

#include <string>

namespace headroom::models::torch_modules {
namespace {

namespace F = torch::nn::functional;

}  // namespace

ClipLayerImpl::ClipLayerImpl(const VisionSpec& s, double eps, bool is_causal) : spec(s), causal(is_causal) {
  layer_norm1 = register_module("layer_norm1", layer_norm(s.hidden, eps));
  auto attn = named_scope(*this, "self_attn");
  q_proj = attn->register_module("q_proj", Linear(s.hidden, s.hidden, true));
  k_proj = attn->register_module("k_proj", Linear(s.hidden, s.hidden, true));
  v_proj = attn->register_module("v_proj", Linear(s.hidden, s.hidden, true));
  out_proj = attn->register_module("out_proj", Linear(s.hidden, s.hidden, true));
  layer_norm2 = register_module("layer_norm2", layer_norm(s.hidden, eps));
  auto mlp = named_scope(*this, "mlp");
  fc1 = mlp->register_module("fc1", Linear(s.hidden, s.mlp, true));
  fc2 = mlp->register_module("fc2", Linear(s.mlp, s.hidden, true));
}

torch::Tensor ClipLayerImpl::forward(const torch::Tensor& hidden) {
  const torch::Tensor x = layer_norm1(hidden);
  // q, k, v in this order (argument order is unspecified; LoRA dropout draws in it).
  const torch::Tensor q = q_proj(x);
  const torch::Tensor k = k_proj(x);
  const torch::Tensor v = v_proj(x);
  const torch::Tensor h = hidden + out_proj(encoder_attention(q, k, v, spec.heads, 0.0, causal));
  // QuickGELUActivation as Python ops: x * sigmoid(1.702 * x).
  const torch::Tensor up = fc1(layer_norm2(h));
  return h + fc2(up * torch::sigmoid(1.702 * up));
}

ClipVisionTowerImpl::ClipVisionTowerImpl(const VisionSpec& v, double layer_norm_eps) : spec(v), eps(layer_norm_eps) {
  auto embeddings = named_scope(*this, "embeddings");
  // CLIPVisionEmbeddings: a bias-free patch convolution, the class embedding
  // and a position table read through position_ids (a non-persistent buffer).
  patch_weight = embeddings->register_module(
      "patch_embedding", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, v.hidden, v.patch).stride(v.patch).bias(false)))
                     ->weight;
  class_embedding = embeddings->register_parameter("class_embedding", torch::randn({v.hidden}) * 0.02);
  position_embedding =
      embeddings->register_module("position_embedding", torch::nn::Embedding(v.positions, v.hidden))->weight;
  pre_layrnorm = register_module("pre_layrnorm", layer_norm(v.hidden, eps));
  // The embeddings block's parameters, pre_layrnorm's included (unregistered:
  // a handle for the runner).
  embeddings_ = std::make_shared<torch::nn::Module>();
  embeddings_->register_module("embeddings", embeddings);
  embeddings_->register_module("pre_layrnorm", pre_layrnorm);
  layer_list_ = named_scope(*named_scope(*this, "encoder"), "layers");
  for (int64_t i = 0; i < v.layers_to_run; ++i) {
    layers.push_back(layer_list_->register_module(std::to_string(i), ClipLayer(v, eps)));
  }
}

void ClipVisionTowerImpl::register_tail() {
  for (int64_t i = spec.layers_to_run; i < spec.layers; ++i) {
    layer_list_->register_module(std::to_string(i), ClipLayer(spec, eps));
  }
  post_layernorm = register_module("post_layernorm", layer_norm(spec.hidden, eps));
}

// CLIPVisionEmbeddings (interpolate_pos_encoding off), then pre_layrnorm.
torch::Tensor ClipVisionTowerImpl::embed(const torch::Tensor& pixel_values) {
  const int64_t batch = pixel_values.size(0);
  // fp32 pixels (VisionSpec::fp32_pixels) over 16-bit weights: the conv runs on their
  // 16-bit copy, as conv2d on CUDA autocast's 16-bit list does.
  const torch::Tensor x = pixel_values.scalar_type() == patch_weight.scalar_type()
                              ? pixel_values
                              : pixel_values.to(patch_weight.scalar_type());
  const torch::Tensor patches =
      F::conv2d(x, patch_weight, F::Conv2dFuncOptions().stride(spec.patch)).flatten(2).transpose(1, 2);
  const torch::Tensor positions =
      torch::arange(spec.positions, torch::TensorOptions().dtype(torch::kLong).device(pixel_values.device()));
  const torch::Tensor hidden =
      torch::cat({class_embedding.view({1, 1, spec.hidden}).expand({batch, 1, spec.hidden}), patches}, 1) +
      F::embedding(positions, position_embedding).unsqueeze(0);
  return pre_layrnorm(hidden);
}

torch::Tensor ClipVisionTowerImpl::encode(const torch::Tensor& pixel_values, const BlockRunner& runner) {
  auto self = this;
  torch::Tensor hidden = run_block(runner, "vision_embeddings", *embeddings_, [self](const std::vector<torch::Tensor>& in) {
    return std::vector<torch::Tensor>{self->embed(in[0])};
  }, {pixel_values})[0];
  return run_encoder_layers(runner, spec.prefix + ".encoder.layers.", layers, hidden);
}

}  // namespace headroom::models::torch_modules
