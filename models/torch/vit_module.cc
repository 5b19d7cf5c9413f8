#include "models/torch/vit_module.h"

#include <cmath>
#include <string>

namespace headroom::models::torch_modules {
namespace {

namespace F = torch::nn::functional;

// ViTConfig's layer_norm_eps default.
constexpr double kLayerNormEps = 1e-12;
// Blip2VisionConfig's layer_norm_eps default (LAVIS: partial(nn.LayerNorm, eps=1e-6)).
constexpr double kBlip2LayerNormEps = 1e-6;

// ViTPatchEmbeddings and Blip2VisionEmbeddings alike (interpolate_pos_encoding
// off): the conv, flatten(2).transpose(1, 2), the class token first, plus the
// position embeddings.
BlockFn patch_embeddings(const VisionSpec& s, torch::Tensor cls, torch::Tensor weight, torch::Tensor bias,
                         torch::Tensor positions) {
  return [s, cls, weight, bias, positions](const std::vector<torch::Tensor>& in) {
    const int64_t batch = in[0].size(0);
    // fp32 pixels (VisionSpec::fp32_pixels) over 16-bit weights: the conv runs on their
    // 16-bit copy, as conv2d on CUDA autocast's 16-bit list does.
    const torch::Tensor x = in[0].scalar_type() == weight.scalar_type() ? in[0] : in[0].to(weight.scalar_type());
    const torch::Tensor patches =
        F::conv2d(x, weight, F::Conv2dFuncOptions().bias(bias).stride(s.patch)).flatten(2).transpose(1, 2);
    return std::vector<torch::Tensor>{torch::cat({cls.expand({batch, 1, s.hidden}), patches}, 1) + positions};
  };
}

}  // namespace

VitLayerImpl::VitLayerImpl(const VisionSpec& s) : spec(s) {
  layernorm_before = register_module("layernorm_before", layer_norm(s.hidden, kLayerNormEps));
  auto attention = named_scope(*this, "attention");
  auto self = named_scope(*attention, "attention");
  query = self->register_module("query", Linear(s.hidden, s.hidden, true));
  key = self->register_module("key", Linear(s.hidden, s.hidden, true));
  value = self->register_module("value", Linear(s.hidden, s.hidden, true));
  attention_output = named_scope(*attention, "output")->register_module("dense", Linear(s.hidden, s.hidden, true));
  layernorm_after = register_module("layernorm_after", layer_norm(s.hidden, kLayerNormEps));
  intermediate = named_scope(*this, "intermediate")->register_module("dense", Linear(s.hidden, s.mlp, true));
  output = named_scope(*this, "output")->register_module("dense", Linear(s.mlp, s.hidden, true));
}

// transformers' ViTLayer with the SDPA attention (ViTSdpaSelfAttention):
// pre-norm, residual around attention and around the MLP; dropouts are 0.
torch::Tensor VitLayerImpl::forward(const torch::Tensor& hidden) {
  const torch::Tensor x = layernorm_before(hidden);
  // q, k, v in this order (argument order is unspecified; LoRA dropout draws in it).
  const torch::Tensor q = query(x);
  const torch::Tensor k = key(x);
  const torch::Tensor v = value(x);
  const torch::Tensor h = hidden + attention_output(encoder_attention(q, k, v, spec.heads));
  const torch::Tensor y = layernorm_after(h);
  return h + output(F::gelu(intermediate(y)));
}

VitForImageClassificationImpl::VitForImageClassificationImpl(const VisionSpec& s, int64_t num_classes,
                                                             const LoraOptions& lora)
    : spec(s), classes(num_classes) {
  auto vit = named_scope(*this, "vit");
  embeddings = named_scope(*vit, "embeddings");
  // nn.Conv2d(3, hidden, kernel_size=patch, stride=patch) and its default init.
  auto conv = embeddings->register_module(
      "patch_embeddings", std::make_shared<torch::nn::Module>())->register_module(
      "projection", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, s.hidden, s.patch).stride(s.patch)));
  patch_weight = conv->weight;
  patch_bias = conv->bias;
  // ViTEmbeddings: cls_token and position_embeddings, trunc_normal(std 0.02) in _init_weights.
  cls_token = embeddings->register_parameter("cls_token", torch::randn({1, 1, s.hidden}) * 0.02);
  position_embeddings =
      embeddings->register_parameter("position_embeddings", torch::randn({1, s.positions, s.hidden}) * 0.02);
  auto layer_list = named_scope(*named_scope(*vit, "encoder"), "layer");
  for (int64_t i = 0; i < s.layers; ++i) layers.push_back(layer_list->register_module(std::to_string(i), VitLayer(s)));
  layernorm = vit->register_module("layernorm", layer_norm(s.hidden, kLayerNormEps));
  classifier = register_module("classifier", Linear(s.hidden, num_classes, true));
  add_lora_adapters(*this, lora);
}

torch::Tensor VitForImageClassificationImpl::loss(const torch::Tensor& pixel_values, const torch::Tensor& labels,
                                                  const BlockRunner& runner) {
  const BlockFn embed = patch_embeddings(spec, cls_token, patch_weight, patch_bias, position_embeddings);
  torch::Tensor hidden = run_block(runner, "vision_embeddings", *embeddings, embed, {pixel_values})[0];
  hidden = run_encoder_layers(runner, spec.prefix + ".encoder.layer.", layers, hidden);
  // ViTForImageClassification: the class token of the final layernorm's output
  // (a view of it), the classifier, CrossEntropyLoss: the graph's block "head".
  auto norm = layernorm;
  auto head = classifier;
  return run_block(runner, "head", *classifier, [norm, head](const std::vector<torch::Tensor>& in) mutable {
    return std::vector<torch::Tensor>{F::cross_entropy(head(norm(in[0]).select(1, 0)), in[1])};
  }, {hidden, labels})[0];
}

Blip2VisionLayerImpl::Blip2VisionLayerImpl(const VisionSpec& s) : spec(s) {
  layer_norm1 = register_module("layer_norm1", layer_norm(s.hidden, kBlip2LayerNormEps));
  auto attn = named_scope(*this, "self_attn");
  qkv = attn->register_module("qkv", Linear(s.hidden, 3 * s.hidden, false));
  // LAVIS Attention: nn.Parameter(torch.zeros(all_head_dim)) each.
  q_bias = attn->register_parameter("q_bias", torch::zeros({s.hidden}));
  v_bias = attn->register_parameter("v_bias", torch::zeros({s.hidden}));
  projection = attn->register_module("projection", Linear(s.hidden, s.hidden, true));
  layer_norm2 = register_module("layer_norm2", layer_norm(s.hidden, kBlip2LayerNormEps));
  auto mlp = named_scope(*this, "mlp");
  fc1 = mlp->register_module("fc1", Linear(s.hidden, s.mlp, true));
  fc2 = mlp->register_module("fc2", Linear(s.mlp, s.hidden, true));
}

// Blip2EncoderLayer with the SDPA attention: pre-norm, residual around the
// attention and around the MLP (Blip2MLP: fc1, gelu, fc2); no dropout.
torch::Tensor Blip2VisionLayerImpl::forward(const torch::Tensor& hidden) {
  const int64_t batch = hidden.size(0);
  const int64_t seq = hidden.size(1);
  const torch::Tensor x = layer_norm1(hidden);
  // LAVIS: qkv_bias = cat(q_bias, zeros_like(v_bias), v_bias);
  // F.linear(x, qkv.weight, qkv_bias). cat's backward keeps nothing, and the
  // linear keeps x as the graph's qkv node does. With adapters the Linear adds
  // them, and the bias after it.
  const torch::Tensor bias = torch::cat({q_bias, torch::zeros_like(v_bias), v_bias});
  const bool plain = !qkv->lora_a.defined() && !qkv->nf4;
  const torch::Tensor mixed = plain ? F::linear(x, qkv->weight, bias) : qkv(x) + bias;
  // Blip2Attention: reshape(B, S, 3, heads, d).permute(2, 0, 3, 1, 4): q, k
  // and v are views of the one qkv output, which SDPA keeps for backward.
  const torch::Tensor parts = mixed.view({batch, seq, 3, spec.heads, spec.hidden / spec.heads}).permute({2, 0, 3, 1, 4});
  const torch::Tensor attn =
      at::scaled_dot_product_attention(parts.select(0, 0), parts.select(0, 1), parts.select(0, 2), {}, 0.0, false);
  // sdpa_attention_forward's transpose(1, 2).contiguous(), then reshape(B, S, -1).
  const torch::Tensor h = hidden + projection(attn.transpose(1, 2).contiguous().view({batch, seq, spec.hidden}));
  return h + fc2(F::gelu(fc1(layer_norm2(h))));
}

Blip2VisionModelImpl::Blip2VisionModelImpl(const VisionSpec& s, const LoraOptions& lora) : spec(s) {
  auto vision = named_scope(*this, "vision_model");
  embeddings = named_scope(*vision, "embeddings");
  // Blip2VisionEmbeddings: class_embedding [1, 1, D], Conv2d(3, D, patch,
  // stride=patch) with its bias, position_embedding [1, positions, D] as parameters.
  class_embedding = embeddings->register_parameter("class_embedding", torch::randn({1, 1, s.hidden}) * 0.02);
  auto conv = embeddings->register_module(
      "patch_embedding", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, s.hidden, s.patch).stride(s.patch)));
  patch_weight = conv->weight;
  patch_bias = conv->bias;
  position_embedding =
      embeddings->register_parameter("position_embedding", torch::randn({1, s.positions, s.hidden}) * 0.02);
  auto list = named_scope(*named_scope(*vision, "encoder"), "layers");
  for (int64_t i = 0; i < s.layers; ++i) layers.push_back(list->register_module(std::to_string(i), Blip2VisionLayer(s)));
  post_layernorm = vision->register_module("post_layernorm", layer_norm(s.hidden, kBlip2LayerNormEps));
  add_lora_adapters(*this, lora);
}

torch::Tensor Blip2VisionModelImpl::loss(const torch::Tensor& pixel_values, const BlockRunner& runner) {
  const BlockFn embed = patch_embeddings(spec, class_embedding, patch_weight, patch_bias, position_embedding);
  torch::Tensor hidden = run_block(runner, "vision_embeddings", *embeddings, embed, {pixel_values})[0];
  hidden = run_encoder_layers(runner, spec.prefix + ".encoder.layers.", layers, hidden);
  // Blip2VisionModel: last_hidden_state = post_layernorm(encoder output); the
  // pooled output (post_layernorm of the class token again) is not read.
  auto norm = post_layernorm;
  const torch::Tensor features = run_block(runner, "head", *post_layernorm, [norm](const std::vector<torch::Tensor>& in) mutable {
    return std::vector<torch::Tensor>{norm(in[0])};
  }, {hidden})[0];
  // The seed story's loss = outputs.mean(): its backward keeps nothing.
  return features.mean();
}

LoraOptions vit_lora(int64_t rank, double alpha) {
  LoraOptions lora;
  lora.rank = rank;
  lora.alpha = alpha;
  lora.targets = {"query", "key", "value", "dense"};
  return lora;
}

LoraOptions eva_vit_lora(int64_t rank, double alpha) {
  LoraOptions lora;
  lora.rank = rank;
  lora.alpha = alpha;
  lora.targets = {"qkv", "projection", "fc1", "fc2"};
  return lora;
}

}  // namespace headroom::models::torch_modules
