#include "models/torch/vit_module.h"

#include <cmath>
#include <string>

namespace headroom::models::torch_modules {
namespace {

namespace F = torch::nn::functional;

// ViTConfig's layer_norm_eps default.
constexpr double kLayerNormEps = 1e-12;


// An empty module that only gives its children a name prefix.

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
  auto embeddings = named_scope(*vit, "embeddings");
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
  const int64_t batch = pixel_values.size(0);
  // ViTPatchEmbeddings: conv, flatten(2).transpose(1, 2); then the class token
  // and the position embeddings (interpolate_pos_encoding off).
  const torch::Tensor patches = F::conv2d(pixel_values, patch_weight,
                                          F::Conv2dFuncOptions().bias(patch_bias).stride(spec.patch))
                                    .flatten(2)
                                    .transpose(1, 2);
  torch::Tensor hidden = torch::cat({cls_token.expand({batch, 1, spec.hidden}), patches}, 1) + position_embeddings;
  for (size_t i = 0; i < layers.size(); ++i) {
    VitLayer layer = layers[i];
    const BlockFn fn = [layer](const std::vector<torch::Tensor>& in) mutable {
      return std::vector<torch::Tensor>{layer->forward(in[0])};
    };
    hidden = run_block(runner, spec.prefix + ".encoder.layer." + std::to_string(i), *layer, fn, {hidden})[0];
  }
  // ViTForImageClassification: the class token of the final layernorm's output
  // (a view of it), the classifier, CrossEntropyLoss.
  const torch::Tensor logits = classifier(layernorm(hidden).select(1, 0));
  return F::cross_entropy(logits, labels);
}

LoraOptions vit_lora(int64_t rank, double alpha) {
  LoraOptions lora;
  lora.rank = rank;
  lora.alpha = alpha;
  lora.targets = {"query", "key", "value", "dense"};
  return lora;
}

}  // namespace headroom::models::torch_modules
