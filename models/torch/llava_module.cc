#include "models/torch/llava_module.h"

#include <string>

namespace headroom::models::torch_modules {
namespace {

namespace F = torch::nn::functional;

// CLIPVisionConfig's layer_norm_eps default.
constexpr double kClipLayerNormEps = 1e-5;



int64_t head_dim_of(const LlamaConfig& c) { return c.head_dim > 0 ? c.head_dim : c.hidden / c.heads; }

}  // namespace

ClipLayerImpl::ClipLayerImpl(const VisionSpec& s) : spec(s) {
  layer_norm1 = register_module("layer_norm1", layer_norm(s.hidden, kClipLayerNormEps));
  auto attn = named_scope(*this, "self_attn");
  q_proj = attn->register_module("q_proj", Linear(s.hidden, s.hidden, true));
  k_proj = attn->register_module("k_proj", Linear(s.hidden, s.hidden, true));
  v_proj = attn->register_module("v_proj", Linear(s.hidden, s.hidden, true));
  out_proj = attn->register_module("out_proj", Linear(s.hidden, s.hidden, true));
  layer_norm2 = register_module("layer_norm2", layer_norm(s.hidden, kClipLayerNormEps));
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
  const torch::Tensor h = hidden + out_proj(encoder_attention(q, k, v, spec.heads));
  // QuickGELUActivation as Python ops: x * sigmoid(1.702 * x).
  const torch::Tensor up = fc1(layer_norm2(h));
  return h + fc2(up * torch::sigmoid(1.702 * up));
}

LlavaForConditionalGenerationImpl::LlavaForConditionalGenerationImpl(const LlavaConfig& c, int64_t placeholder,
                                                                     const LoraOptions& lora)
    : config(c), image_token(placeholder) {
  const VisionSpec& v = c.vision;
  auto vision = named_scope(*named_scope(*this, "vision_tower"), "vision_model");
  auto embeddings = named_scope(*vision, "embeddings");
  // CLIPVisionEmbeddings: a bias-free patch convolution, the class embedding
  // and a position table read through position_ids (a non-persistent buffer).
  patch_weight = embeddings->register_module(
      "patch_embedding", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, v.hidden, v.patch).stride(v.patch).bias(false)))
                     ->weight;
  class_embedding = embeddings->register_parameter("class_embedding", torch::randn({v.hidden}) * 0.02);
  position_embedding =
      embeddings->register_module("position_embedding", torch::nn::Embedding(v.positions, v.hidden))->weight;
  pre_layrnorm = vision->register_module("pre_layrnorm", layer_norm(v.hidden, kClipLayerNormEps));
  auto vision_layers_scope = named_scope(*named_scope(*vision, "encoder"), "layers");
  for (int64_t i = 0; i < v.layers_to_run; ++i) {
    vision_layers.push_back(vision_layers_scope->register_module(std::to_string(i), ClipLayer(v)));
  }
  auto projector = named_scope(*this, "multi_modal_projector");
  linear_1 = projector->register_module("linear_1", Linear(v.hidden, c.text.hidden, true));
  linear_2 = projector->register_module("linear_2", Linear(c.text.hidden, c.text.hidden, true));
  auto language_model = named_scope(*this, "language_model");
  auto model = named_scope(*language_model, "model");
  embed_tokens = model->register_module("embed_tokens", torch::nn::Embedding(c.text.vocab, c.text.hidden));
  auto list = named_scope(*model, "layers");
  for (int64_t i = 0; i < c.text.layers; ++i) layers.push_back(list->register_module(std::to_string(i), DecoderLayer(c.text)));
  norm = model->register_module("norm", RMSNorm(c.text.hidden, 1e-5, c.text.rms_norm != RmsNormStyle::kFused));
  lm_head = language_model->register_module(
      "lm_head", c.text.tie_embeddings ? Linear(embed_tokens->weight) : Linear(c.text.hidden, c.text.vocab, false));
  add_lora_adapters(*this, lora);
  // The vision layers past the feature layer and post_layernorm: in the
  // checkpoint, run by transformers, read by nothing. Registered after the
  // adapters (PEFT's adapters there would train nothing; the planner's graph
  // holds these parameters in one node that is not a linear) and never run.
  for (int64_t i = v.layers_to_run; i < v.layers; ++i) vision_layers_scope->register_module(std::to_string(i), ClipLayer(v));
  post_layernorm = vision->register_module("post_layernorm", layer_norm(v.hidden, kClipLayerNormEps));
}

std::pair<torch::Tensor, torch::Tensor> LlavaForConditionalGenerationImpl::loss_and_logits(
    const torch::Tensor& pixel_values, const torch::Tensor& input_ids, const BlockRunner& runner) {
  const VisionSpec& v = config.vision;
  const int64_t batch = pixel_values.size(0);
  const torch::Tensor patches =
      F::conv2d(pixel_values, patch_weight, F::Conv2dFuncOptions().stride(v.patch)).flatten(2).transpose(1, 2);
  const torch::Tensor positions = torch::arange(v.positions, torch::TensorOptions().dtype(torch::kLong).device(pixel_values.device()));
  torch::Tensor hidden =
      torch::cat({class_embedding.view({1, 1, v.hidden}).expand({batch, 1, v.hidden}), patches}, 1) +
      F::embedding(positions, position_embedding).unsqueeze(0);
  hidden = pre_layrnorm(hidden);
  for (size_t i = 0; i < vision_layers.size(); ++i) {
    ClipLayer layer = vision_layers[i];
    const BlockFn fn = [layer](const std::vector<torch::Tensor>& in) mutable {
      return std::vector<torch::Tensor>{layer->forward(in[0])};
    };
    hidden = run_block(runner, v.prefix + ".encoder.layers." + std::to_string(i), *layer, fn, {hidden})[0];
  }
  // vision_feature_select_strategy "default": the patches, without the class token (a view).
  const torch::Tensor features = hidden.narrow(1, 1, config.image_tokens);
  const torch::Tensor image_embeds = linear_2(F::gelu(linear_1(features)));

  const int64_t seq = input_ids.size(1);
  torch::Tensor embeds = embed_tokens(input_ids);
  const torch::Tensor mask = (input_ids == image_token).unsqueeze(-1).expand_as(embeds);
  embeds = embeds.masked_scatter(mask, image_embeds.to(embeds.scalar_type()));
  const int64_t head_dim = head_dim_of(config.text);
  const auto [cos, sin] = llama_rope_tables(seq, head_dim, embeds.options().requires_grad(false));
  for (size_t i = 0; i < layers.size(); ++i) {
    DecoderLayer layer = layers[i];
    const BlockFn fn = [layer](const std::vector<torch::Tensor>& in) mutable {
      return std::vector<torch::Tensor>{layer->forward(in[0], in[1], in[2])};
    };
    embeds = run_block(runner, "language_model.model.layers." + std::to_string(i), *layer, fn, {embeds, cos, sin})[0];
  }
  const torch::Tensor logits = lm_head(norm(embeds));
  // Next-token labels, the image placeholders and the last position ignored
  // (LLaVA's data collators set image positions to -100).
  torch::Tensor labels = torch::constant_pad_nd(input_ids.narrow(1, 1, seq - 1), {0, 1}, -100);
  labels = labels.masked_fill(labels == image_token, -100).reshape({-1});
  const torch::Tensor loss =
      F::cross_entropy(logits.view({-1, config.text.vocab}).to(torch::kFloat), labels,
                       F::CrossEntropyFuncOptions().ignore_index(-100));
  return {loss, logits};
}

}  // namespace headroom::models::torch_modules
