#include "models/torch/llava_module.h"

#include <string>

namespace headroom::models::torch_modules {
namespace {

namespace F = torch::nn::functional;

int64_t head_dim_of(const LlamaConfig& c) { return c.head_dim > 0 ? c.head_dim : c.hidden / c.heads; }

}  // namespace

LlavaForConditionalGenerationImpl::LlavaForConditionalGenerationImpl(const LlavaConfig& c, int64_t placeholder,
                                                                     const LoraOptions& lora)
    : config(c), image_token(placeholder) {
  const VisionSpec& v = c.vision;
  vision = named_scope(*this, "vision_tower")->register_module("vision_model", ClipVisionTower(v));
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
  vision->register_tail();
}

std::pair<torch::Tensor, torch::Tensor> LlavaForConditionalGenerationImpl::loss_and_logits(
    const torch::Tensor& pixel_values, const torch::Tensor& input_ids, const BlockRunner& runner) {
  const torch::Tensor hidden = vision->encode(pixel_values, runner);
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
