// Checkpointing through LibTorch: gradients equal those of the run without
// checkpointing, for the first block, every block, a frozen base with LoRA
// adapters (whose first block's input does not require grad), and a fully
// frozen block/model, on tiny-llama and tiny-flux, and on the ViT, EVA ViT,
// LLaVA, ResNet, BERT and CLIP modules (float64).
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <functional>
#include <set>
#include <string>

#include "executor/checkpoint.h"
#include "models/flux.h"
#include "models/llama.h"
#include "models/torch/bert_module.h"
#include "models/torch/clip_module.h"
#include "models/torch/flux_module.h"
#include "models/torch/llama_module.h"
#include "models/torch/llava_module.h"
#include "models/torch/resnet_module.h"
#include "models/torch/vit_module.h"
#include "models/zoo_builders.h"


// c10/util/logging defines CHECK (an abort); the tests mean doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

namespace headroom::executor {
namespace {

namespace tm = models::torch_modules;

// Sets float64 as the default dtype for one test.
struct Float64 {
  Float64() { torch::set_default_dtype(caffe2::TypeMeta::Make<double>()); }
  ~Float64() { torch::set_default_dtype(caffe2::TypeMeta::Make<float>()); }
};

using Loss = std::function<torch::Tensor(const tm::BlockRunner&)>;

// Gradients of every parameter after one backward, in parameter order (undefined: none).
std::vector<torch::Tensor> gradients(torch::nn::Module& model, const Loss& loss_of, const std::set<std::string>& blocks) {
  model.zero_grad();
  const torch::Tensor loss = loss_of(checkpoint_runner(blocks));
  if (loss.requires_grad()) loss.backward();
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : model.parameters()) out.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  return out;
}

// Largest relative difference over all parameters; both sides must agree on which have gradients.
double max_relative_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  int compared = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(a[i].defined() == b[i].defined());
    if (!a[i].defined()) continue;
    ++compared;
    const double diff = (a[i] - b[i]).abs().max().item<double>();
    const double scale = std::max(1e-12, a[i].abs().max().item<double>());
    worst = std::max(worst, diff / scale);
  }
  CHECK(compared > 0);
  return worst;
}

void check_matches(torch::nn::Module& model, const Loss& loss, const std::set<std::string>& blocks, const char* what) {
  // Every block asked for is one the model runs through the runner: a name the
  // model does not use would be checkpointed by nothing and match trivially.
  std::set<std::string> seen;
  const tm::BlockRunner recording = [&](const std::string& name, torch::nn::Module&, const tm::BlockFn& fn,
                                        const std::vector<torch::Tensor>& inputs) {
    seen.insert(name);
    return fn(inputs);
  };
  (void)loss(recording);
  for (const std::string& block : blocks) {
    INFO("block " << block);
    CHECK(seen.count(block) == 1);
  }
  // The same seed for both runs: dropout draws the same masks when the
  // checkpointed recompute replays the forward's generator state.
  torch::manual_seed(11);
  const auto plain = gradients(model, loss, {});
  torch::manual_seed(11);
  const double diff = max_relative_difference(plain, gradients(model, loss, blocks));
  MESSAGE(std::string(what) << ": max relative gradient difference " << diff);
  CHECK(diff < 1e-10);
}

// Non-zero LoRA B, so that every adapter gradient is non-trivial.
void randomize_lora_b(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (auto& item : model.named_parameters()) {
    if (item.key().find("lora_B") != std::string::npos) item.value().normal_(0, 0.02);
  }
}

bool has_grad(torch::nn::Module& model, const std::string& name) {
  for (auto& item : model.named_parameters()) {
    if (item.key() == name) return item.value().grad().defined();
  }
  FAIL("no parameter " << name);
  return false;
}

const std::set<std::string> kLlamaAll = {"model.layers.0", "model.layers.1", "model.layers.2", "model.layers.3"};
const std::set<std::string> kFluxAll = {"transformer_blocks.0", "transformer_blocks.1", "single_transformer_blocks.0",
                                        "single_transformer_blocks.1"};

}  // namespace

TEST_CASE("tiny-llama: checkpointed gradients equal plain gradients") {
  const Float64 f64;
  torch::manual_seed(0);
  tm::LlamaForCausalLM model(models::kTinyLlama);
  const torch::Tensor ids = torch::randint(0, models::kTinyLlama.vocab, {2, 16}, torch::kLong);
  const Loss loss = [&](const tm::BlockRunner& r) { return model->forward(ids, r); };
  SUBCASE("the first block") { check_matches(*model, loss, {"model.layers.0"}, "tiny-llama first block"); }
  SUBCASE("every block") { check_matches(*model, loss, kLlamaAll, "tiny-llama every block"); }
  SUBCASE("a fully frozen block among trainable ones") {
    for (auto& p : model->layers[1]->parameters()) p.set_requires_grad(false);
    check_matches(*model, loss, kLlamaAll, "tiny-llama frozen layer 1");
  }
}

TEST_CASE("tiny-llama: frozen base with adapters, the first block's input needs no grad") {
  const Float64 f64;
  torch::manual_seed(1);
  tm::LlamaForCausalLM model(models::kTinyLlama, tm::llama_lora(4));
  tm::freeze_base(*model);
  randomize_lora_b(*model);
  const torch::Tensor ids = torch::randint(0, models::kTinyLlama.vocab, {2, 16}, torch::kLong);
  const Loss loss = [&](const tm::BlockRunner& r) { return model->forward(ids, r); };
  check_matches(*model, loss, kLlamaAll, "tiny-llama LoRA every block");
  check_matches(*model, loss, {"model.layers.0"}, "tiny-llama LoRA first block");
  CHECK(has_grad(*model, "model.layers.0.self_attn.q_proj.lora_A.weight"));
  CHECK_FALSE(has_grad(*model, "model.layers.0.self_attn.q_proj.weight"));
}

TEST_CASE("tiny-llama: LoRA dropout draws the same masks in the recompute as in the forward") {
  const Float64 f64;
  torch::manual_seed(1);
  tm::LoraOptions lora = tm::llama_lora(4);
  lora.dropout = 0.3;
  tm::LlamaForCausalLM model(models::kTinyLlama, lora);
  tm::freeze_base(*model);
  randomize_lora_b(*model);
  const torch::Tensor ids = torch::randint(0, models::kTinyLlama.vocab, {2, 16}, torch::kLong);
  const Loss loss = [&](const tm::BlockRunner& r) { return model->forward(ids, r); };
  check_matches(*model, loss, kLlamaAll, "tiny-llama LoRA dropout every block");
  // And the generator continues after backward as if nothing had been replayed.
  torch::manual_seed(5);
  (void)gradients(*model, loss, kLlamaAll);
  const double after_checkpointed = torch::rand({1}).item<double>();
  torch::manual_seed(5);
  (void)gradients(*model, loss, {});
  CHECK(torch::rand({1}).item<double>() == after_checkpointed);
}

TEST_CASE("tiny-llama: a fully frozen model checkpoints without error and has no gradients") {
  torch::manual_seed(2);
  tm::LlamaForCausalLM model(models::kTinyLlama);
  for (auto& p : model->parameters()) p.set_requires_grad(false);
  const torch::Tensor ids = torch::randint(0, models::kTinyLlama.vocab, {1, 8}, torch::kLong);
  const torch::Tensor loss = model->forward(ids, checkpoint_runner(kLlamaAll));
  CHECK_FALSE(loss.requires_grad());
  for (const torch::Tensor& p : model->parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("tiny-flux: checkpointed gradients equal plain gradients") {
  const Float64 f64;
  torch::manual_seed(3);
  tm::FluxTransformer model(models::kTinyFlux);
  const tm::FluxBatch batch = tm::synthetic_flux_batch(models::kTinyFlux, 2, 16);
  const Loss loss = [&](const tm::BlockRunner& r) { return model->forward(batch, r); };
  SUBCASE("the first block") { check_matches(*model, loss, {"transformer_blocks.0"}, "tiny-flux first block"); }
  SUBCASE("every block") { check_matches(*model, loss, kFluxAll, "tiny-flux every block"); }
  SUBCASE("a fully frozen block among trainable ones") {
    for (auto& p : model->single_transformer_blocks[0]->parameters()) p.set_requires_grad(false);
    check_matches(*model, loss, kFluxAll, "tiny-flux frozen single block 0");
  }
}

TEST_CASE("tiny-flux: frozen base with adapters") {
  const Float64 f64;
  torch::manual_seed(4);
  tm::FluxTransformer model(models::kTinyFlux, tm::flux_lora(4));
  tm::freeze_base(*model);
  randomize_lora_b(*model);
  const tm::FluxBatch batch = tm::synthetic_flux_batch(models::kTinyFlux, 2, 16);
  const Loss loss = [&](const tm::BlockRunner& r) { return model->forward(batch, r); };
  check_matches(*model, loss, kFluxAll, "tiny-flux LoRA every block");
  CHECK(has_grad(*model, "transformer_blocks.0.attn.to_out.0.lora_A.weight"));
  CHECK(has_grad(*model, "single_transformer_blocks.1.attn.to_q.lora_B.weight"));
  CHECK_FALSE(has_grad(*model, "transformer_blocks.0.attn.to_q.weight"));
}

TEST_CASE("tiny-flux: a fully frozen model checkpoints without error") {
  torch::manual_seed(5);
  tm::FluxTransformer model(models::kTinyFlux);
  for (auto& p : model->parameters()) p.set_requires_grad(false);
  const torch::Tensor loss = model->forward(tm::synthetic_flux_batch(models::kTinyFlux, 1, 16), checkpoint_runner(kFluxAll));
  CHECK_FALSE(loss.requires_grad());
}

namespace {

// A ViT of 2 layers at 32 px, patch 8 (16 patches and the class token).
models::VisionSpec tiny_vit_spec(models::VisionStyle style, const std::string& prefix) {
  models::VisionSpec s;
  s.style = style;
  s.prefix = prefix;
  s.hidden = 32;
  s.layers = s.layers_to_run = 2;
  s.heads = 4;
  s.mlp = 64;
  s.patch = 8;
  s.positions = 17;
  return s;
}

}  // namespace

TEST_CASE("ViT classifier: checkpointed gradients equal plain gradients, fully trained and with LoRA") {
  const Float64 f64;
  torch::manual_seed(4);
  const torch::Tensor images = torch::randn({2, 3, 32, 32});
  const torch::Tensor labels = torch::tensor({1, 3}, torch::kLong);
  const std::set<std::string> all = {"vit.encoder.layer.0", "vit.encoder.layer.1"};
  tm::VitForImageClassification full(tiny_vit_spec(models::VisionStyle::kVit, "vit"), 5);
  const Loss full_loss = [&](const tm::BlockRunner& r) { return full->loss(images, labels, r); };
  check_matches(*full, full_loss, all, "ViT every block");
  tm::VitForImageClassification lora(tiny_vit_spec(models::VisionStyle::kVit, "vit"), 5, tm::vit_lora(4));
  tm::freeze_base(*lora);
  randomize_lora_b(*lora);
  const Loss lora_loss = [&](const tm::BlockRunner& r) { return lora->loss(images, labels, r); };
  check_matches(*lora, lora_loss, {"vit.encoder.layer.0"}, "ViT LoRA first block");
}

TEST_CASE("EVA ViT (Blip2VisionModel): checkpointed gradients equal plain gradients, fully trained and with LoRA") {
  const Float64 f64;
  torch::manual_seed(5);
  const torch::Tensor images = torch::randn({2, 3, 32, 32});
  const models::VisionSpec spec = models::tiny_eva_vit_spec();
  const std::set<std::string> all = {"vision_model.encoder.layers.0", "vision_model.encoder.layers.1",
                                     "vision_model.encoder.layers.2"};
  // The loss is the mean of the post LayerNorm's output: with its weight all
  // ones, the mean over channels of a normalised row is 0 whatever the row, and
  // the encoder would get no gradient at all. Random norm weights and q/v
  // biases make every gradient non-trivial.
  auto perturb = [](torch::nn::Module& model) {
    torch::NoGradGuard no_grad;
    for (auto& item : model.named_parameters()) {
      const std::string& name = item.key();
      if (name.find("norm") != std::string::npos && name.ends_with(".weight")) item.value().normal_(1, 0.5);
      if (name.ends_with("q_bias") || name.ends_with("v_bias")) item.value().normal_(0, 0.1);
    }
  };
  tm::Blip2VisionModel full(spec);
  perturb(*full);
  const Loss full_loss = [&](const tm::BlockRunner& r) { return full->loss(images, r); };
  check_matches(*full, full_loss, all, "EVA ViT every block");
  CHECK(has_grad(*full, "vision_model.encoder.layers.0.self_attn.q_bias"));
  CHECK(has_grad(*full, "vision_model.embeddings.class_embedding"));
  tm::Blip2VisionModel lora(spec, tm::eva_vit_lora(4));
  perturb(*lora);
  tm::freeze_base(*lora);
  randomize_lora_b(*lora);
  const Loss lora_loss = [&](const tm::BlockRunner& r) { return lora->loss(images, r); };
  check_matches(*lora, lora_loss, {"vision_model.encoder.layers.0", "vision_model.encoder.layers.2"},
                "EVA ViT LoRA (qkv, projection, fc1, fc2)");
  CHECK(has_grad(*lora, "vision_model.encoder.layers.0.self_attn.qkv.lora_A.weight"));
}

TEST_CASE("LLaVA: checkpointed gradients equal plain gradients in the vision tower and the decoder") {
  const Float64 f64;
  torch::manual_seed(6);
  models::LlavaConfig config;
  config.vision = tiny_vit_spec(models::VisionStyle::kClip, "vision_tower.vision_model");
  config.vision.layers = 3;  // the last one past the feature layer, never run
  config.text = models::kTinyLlama;
  config.image_tokens = 16;
  const int64_t image_token = 255;
  tm::LlavaForConditionalGeneration model(config, image_token);
  const torch::Tensor images = torch::randn({2, 3, 32, 32});
  torch::Tensor ids = torch::randint(0, 200, {2, 24}, torch::kLong);
  ids.narrow(1, 0, 16).fill_(image_token);
  const Loss loss = [&](const tm::BlockRunner& r) { return model->loss_and_logits(images, ids, r).first; };
  check_matches(*model, loss,
                {"vision_tower.vision_model.encoder.layers.0", "vision_tower.vision_model.encoder.layers.1",
                 "language_model.model.layers.0", "language_model.model.layers.3"},
                "LLaVA tower and decoder blocks");
}

TEST_CASE("ResNet: checkpointed gradients equal plain gradients with BatchNorm in training mode") {
  // BatchNorm normalizes with the batch's statistics, which the recompute
  // sees again: the gradients match (the running statistics are updated once
  // more by the recompute, as under torch.utils.checkpoint).
  const Float64 f64;
  torch::manual_seed(8);
  tm::ResNet model(models::kTinyResNet);
  const torch::Tensor images = torch::randn({4, 3, 32, 32});
  const torch::Tensor labels = torch::tensor({0, 1, 2, 3}, torch::kLong);
  const Loss loss = [&](const tm::BlockRunner& r) { return model->loss(images, labels, r); };
  check_matches(*model, loss, {"layer1.0", "layer2.0", "layer3.0", "layer4.0"}, "ResNet every block");
}

namespace {

// A BERT (or RoBERTa) of 2 layers with every dropout on: the recompute must
// draw the forward's masks (hidden, attention probabilities, classifier).
models::BertConfig tiny_bert_config(bool roberta) {
  models::BertConfig c;
  c.hidden = 32;
  c.layers = 2;
  c.heads = 4;
  c.intermediate = 64;
  c.vocab = 100;
  c.positions = 20;
  c.labels = 3;
  c.hidden_dropout = c.attention_dropout = c.classifier_dropout = 0.1;
  if (roberta) {
    c.prefix = "roberta";
    c.roberta_head = true;
    c.pad_token = 1;
    c.token_types = 1;
  }
  return c;
}

void check_bert(bool roberta) {
  const Float64 f64;
  torch::manual_seed(9);
  const models::BertConfig c = tiny_bert_config(roberta);
  const torch::Tensor ids = torch::randint(2, c.vocab, {2, 12}, torch::kLong);
  const torch::Tensor types = torch::zeros_like(ids);
  const torch::Tensor labels = torch::tensor({0, 2}, torch::kLong);
  const std::string p = c.prefix;
  const std::set<std::string> all = {"embeddings", p + ".encoder.layer.0", p + ".encoder.layer.1", "head"};
  tm::BertForSequenceClassification full(c);
  const Loss full_loss = [&](const tm::BlockRunner& r) { return full->loss(ids, types, labels, r); };
  check_matches(*full, full_loss, all, roberta ? "RoBERTa every block" : "BERT every block");
  tm::BertForSequenceClassification lora(c, tm::bert_lora(4));
  tm::freeze_base(*lora);
  randomize_lora_b(*lora);
  const Loss lora_loss = [&](const tm::BlockRunner& r) { return lora->loss(ids, types, labels, r); };
  check_matches(*lora, lora_loss, {p + ".encoder.layer.0"}, roberta ? "RoBERTa LoRA first layer" : "BERT LoRA first layer");
}

}  // namespace

TEST_CASE("BERT: checkpointed gradients equal plain gradients with dropout, fully trained and with LoRA") {
  check_bert(false);
}

TEST_CASE("RoBERTa: checkpointed gradients equal plain gradients with dropout, fully trained and with LoRA") {
  check_bert(true);
}

TEST_CASE("CLIP: checkpointed gradients equal plain gradients in both towers, fully trained and with LoRA") {
  const Float64 f64;
  torch::manual_seed(12);
  models::HfClip clip;
  clip.config.vision = tiny_vit_spec(models::VisionStyle::kClip, "vision_model");
  clip.config.text_hidden = 32;
  clip.config.text_layers = 2;
  clip.config.text_heads = 4;
  clip.config.text_mlp = 64;
  clip.config.text_vocab = 100;
  clip.config.text_tokens = 10;
  clip.config.projection_dim = 16;
  clip.eos_token = 99;
  const torch::Tensor images = torch::randn({3, 3, 32, 32});
  torch::Tensor ids = torch::randint(0, 99, {3, 10}, torch::kLong);
  ids.select(1, 9).fill_(99);
  const std::set<std::string> all = {"vision_embeddings", "vision_model.encoder.layers.0", "vision_model.encoder.layers.1",
                                     "vision_head", "text_embeddings", "text_model.encoder.layers.0",
                                     "text_model.encoder.layers.1", "text_head", "head"};
  tm::ClipModel full(clip);
  const Loss full_loss = [&](const tm::BlockRunner& r) { return full->loss(images, ids, r); };
  check_matches(*full, full_loss, all, "CLIP every block");
  tm::ClipModel lora(clip, tm::clip_lora(4));
  tm::freeze_base(*lora);
  randomize_lora_b(*lora);
  const Loss lora_loss = [&](const tm::BlockRunner& r) { return lora->loss(images, ids, r); };
  check_matches(*lora, lora_loss, {"vision_model.encoder.layers.0", "text_model.encoder.layers.1"},
                "CLIP LoRA a layer of each tower");
}

}  // namespace headroom::executor
