#include "models/torch/clip_module.h"

#include <string>

namespace headroom::models::torch_modules {
namespace {

namespace F = torch::nn::functional;

// _get_vector_norm: sqrt(sum(x^2)) over the last dimension, as pow, sum, pow.
torch::Tensor vector_norm(const torch::Tensor& x) { return torch::pow(torch::pow(x, 2).sum(-1, true), 0.5); }

}  // namespace

ClipTextTowerImpl::ClipTextTowerImpl(const HfClip& clip) {
  const ClipConfig& c = clip.config;
  spec = c.vision;
  spec.prefix = "text_model";
  spec.hidden = c.text_hidden;
  spec.layers = spec.layers_to_run = c.text_layers;
  spec.heads = c.text_heads;
  spec.mlp = c.text_mlp;
  spec.positions = c.text_tokens;
  embeddings_ = named_scope(*this, "embeddings");
  token_embedding = named_scope(*embeddings_, "token_embedding")
                        ->register_parameter("weight", torch::randn({c.text_vocab, c.text_hidden}) * 0.02);
  position_embedding = named_scope(*embeddings_, "position_embedding")
                           ->register_parameter("weight", torch::randn({c.text_tokens, c.text_hidden}) * 0.01);
  auto list = named_scope(*named_scope(*this, "encoder"), "layers");
  for (int64_t i = 0; i < c.text_layers; ++i) {
    layers.push_back(list->register_module(std::to_string(i), ClipLayer(spec, clip.text_layer_norm_eps, true)));
  }
  final_layer_norm = register_module("final_layer_norm", layer_norm(c.text_hidden, clip.text_layer_norm_eps));
}

torch::Tensor ClipTextTowerImpl::encode(const torch::Tensor& input_ids, const BlockRunner& runner) {
  auto self = this;
  // CLIPTextEmbeddings: tokens plus the position table read through its
  // position_ids buffer, one row for the batch.
  torch::Tensor hidden = run_block(runner, "text_embeddings", *embeddings_, [self](const std::vector<torch::Tensor>& in) {
    const torch::Tensor positions = torch::arange(in[0].size(1), in[0].options()).unsqueeze(0);
    return std::vector<torch::Tensor>{F::embedding(in[0], self->token_embedding) +
                                      F::embedding(positions, self->position_embedding)};
  }, {input_ids})[0];
  return run_encoder_layers(runner, spec.prefix + ".encoder.layers.", layers, hidden);
}

ClipModelImpl::ClipModelImpl(const HfClip& c, const LoraOptions& lora) : clip(c) {
  vision_model = register_module("vision_model", ClipVisionTower(c.config.vision, c.layer_norm_eps));
  text_model = register_module("text_model", ClipTextTower(c));
  visual_projection = register_module("visual_projection", Linear(c.config.vision.hidden, c.config.projection_dim, false));
  text_projection = register_module("text_projection", Linear(c.config.text_hidden, c.config.projection_dim, false));
  logit_scale = register_parameter("logit_scale", torch::tensor(c.logit_scale_init));
  add_lora_adapters(*this, lora);
  vision_model->register_tail();  // post_layernorm (every layer runs)
  vision_head_ = std::make_shared<torch::nn::Module>();
  vision_head_->register_module("post_layernorm", vision_model->post_layernorm);
  text_head_ = std::make_shared<torch::nn::Module>();
  text_head_->register_module("final_layer_norm", text_model->final_layer_norm);
  head_ = std::make_shared<torch::nn::Module>();
  head_->register_module("visual_projection", visual_projection);
  head_->register_module("text_projection", text_projection);
  head_->register_parameter("logit_scale", logit_scale, logit_scale.requires_grad());
}

torch::Tensor ClipModelImpl::loss(const torch::Tensor& pixel_values, const torch::Tensor& input_ids,
                                  const BlockRunner& runner) {
  auto self = this;
  // CLIPVisionModel: post_layernorm over last_hidden_state[:, 0, :], a view
  // of the last layer's output, which the norm keeps whole for its backward.
  const torch::Tensor image = vision_model->encode(pixel_values, runner);
  const torch::Tensor image_pooled = run_block(runner, "vision_head", *vision_head_, [self](const std::vector<torch::Tensor>& in) {
    return std::vector<torch::Tensor>{self->vision_model->post_layernorm(in[0].select(1, 0))};
  }, {image})[0];
  // CLIPTextModel: final_layer_norm, then the EOS token of each row (advanced
  // indexing: a new [B, hidden] tensor); with eos_token_id 2 (configs before
  // transformers#24773) the highest id's position.
  const torch::Tensor text = text_model->encode(input_ids, runner);
  const int64_t eos = clip.eos_token;
  const torch::Tensor text_pooled = run_block(runner, "text_head", *text_head_, [self, eos](const std::vector<torch::Tensor>& in) {
    const torch::Tensor ids = in[1].to(torch::kInt);
    const torch::Tensor position = eos == 2 ? ids.argmax(-1) : (ids == eos).to(torch::kInt).argmax(-1);
    const torch::Tensor rows = torch::arange(in[1].size(0), in[1].options());
    return std::vector<torch::Tensor>{self->text_model->final_layer_norm(in[0]).index({rows, position})};
  }, {text, input_ids})[0];
  // CLIPModel.forward: projections, normalised embeddings, logits scaled by
  // exp(logit_scale), and image_text_contrastive_loss (the mean of the
  // caption and image cross-entropies against the diagonal).
  return run_block(runner, "head", *head_, [self](const std::vector<torch::Tensor>& in) {
    torch::Tensor image_embeds = self->visual_projection(in[0]);
    torch::Tensor text_embeds = self->text_projection(in[1]);
    image_embeds = image_embeds / vector_norm(image_embeds);
    text_embeds = text_embeds / vector_norm(text_embeds);
    const torch::Tensor logits_per_text = torch::matmul(text_embeds, image_embeds.t()) * self->logit_scale.exp();
    const torch::Tensor labels = torch::arange(logits_per_text.size(0), logits_per_text.options().dtype(torch::kLong));
    const torch::Tensor caption_loss = F::cross_entropy(logits_per_text, labels);
    const torch::Tensor image_loss = F::cross_entropy(logits_per_text.t(), labels);
    return std::vector<torch::Tensor>{(caption_loss + image_loss) / 2.0};
  }, {image_pooled, text_pooled})[0];
}

LoraOptions clip_lora(int64_t rank, double alpha) {
  LoraOptions lora;
  lora.rank = rank;
  lora.alpha = alpha;
  lora.targets = {"q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"};
  return lora;
}

}  // namespace headroom::models::torch_modules
