#include "executor/train_model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "executor/token_data.h"
#include "executor/weights.h"
#include "graph/op_traits.h"
#include "models/hf_import.h"
#include "models/torch/bert_module.h"
#include "models/torch/clip_module.h"
#include "models/torch/flux_module.h"
#include "models/torch/llama_module.h"
#include "models/torch/llava_module.h"
#include "models/torch/resnet_module.h"
#include "models/torch/vit_module.h"
#include "planner/mechanisms/trainability.h"
#include "planner/settings/lora_targets.h"
#include "planner/settings/stack.h"

namespace headroom::executor {
namespace {

namespace tm = models::torch_modules;

// The modules the planner's graph gave adapters: PEFT's "all-linear" resolved on the graph
// (planner/mechanisms/peft_targets.h), by full name.
std::vector<std::string> adapted_modules(const graph::LayerGraph& graph) {
  std::vector<std::string> names;
  for (const graph::Node& node : graph.nodes) {
    if (std::any_of(node.params.begin(), node.params.end(), planner::is_lora_adapter)) names.push_back(node.name);
  }
  return names;
}

tm::LoraOptions lora_options(const planner::Plan& plan, const graph::LayerGraph& graph, tm::LoraOptions defaults) {
  const planner::RunSettings& s = plan.settings;
  if (s.mode == planner::TrainMode::kFull) return {};
  defaults.dropout = s.lora.dropout;
  if (planner::is_all_linear(s.lora.targets)) {
    const std::vector<std::string> adapted = adapted_modules(graph);
    defaults.targets = {adapted.begin(), adapted.end()};
  } else if (!s.lora.targets.empty()) {
    defaults.targets = {s.lora.targets.begin(), s.lora.targets.end()};
  }
  defaults.skip = s.lora_skip;
  defaults.skip.insert(defaults.skip.end(), s.train_patterns.begin(), s.train_patterns.end());
  return defaults;
}

// Every module parameter must be a graph parameter; it trains iff the graph says so.
Status apply_trainability(torch::nn::Module& module, const graph::LayerGraph& graph, const std::string& model) {
  std::map<std::string, bool> trainable;
  for (const graph::Node& node : graph.nodes) {
    // A parameter nothing reads ("unused" node: LLaVA's vision layers past the
    // feature layer) never gets a gradient; frozen here it gets no optimizer
    // state either, as torch.optim gives it none (planner/memory/model_states.cc).
    for (const graph::Param& param : node.params) trainable[param.name] = param.trainable && node.op != graph::op::kUnused;
  }
  for (auto& item : module.named_parameters()) {
    const auto found = trainable.find(item.key());
    if (found == trainable.end()) {
      return Status::internal(
          model + ": the LibTorch module has parameter \"" + item.key() +
          "\" that the planner's graph lacks (expected the same names; a bug in models/)");
    }
    item.value().set_requires_grad(found->second);
  }
  return Status::ok();
}

class LlamaModel final : public TrainModel {
 public:
  LlamaModel(const models::LlamaConfig& config, const tm::LoraOptions& lora, TokenSource data,
             const TrainModelOptions& options)
      : net_(config, lora), data_(std::move(data)), options_(options) {}
  torch::nn::Module& module() override { return *net_; }
  int64_t tokens_per_sample() const override { return options_.seq_len; }

  Result<torch::Tensor> loss(int64_t first, int64_t batch, const tm::BlockRunner& runner) override {
    std::vector<int64_t> ids;
    ids.reserve(static_cast<size_t>(batch * options_.seq_len));
    for (int64_t i = 0; i < batch; ++i) {
      Result<std::vector<int64_t>> sample = data_.sample(first + i, options_.seq_len);
      if (!sample.is_ok()) return sample.status();
      ids.insert(ids.end(), sample.value().begin(), sample.value().end());
    }
    const torch::Tensor input = torch::tensor(ids, torch::kLong).view({batch, options_.seq_len}).to(options_.device);
    auto [loss, logits] = net_->loss_and_logits(input, runner);
    if (options_.keep_logits) logits_ = logits;
    return loss;
  }
  void release_outputs() override { logits_ = torch::Tensor(); }

 private:
  tm::LlamaForCausalLM net_;
  torch::Tensor logits_;  // held as a training loop holds CausalLMOutput (keep_logits)
  TokenSource data_;
  TrainModelOptions options_;
};

// Flux trains on synthetic flow-matching batches from a fixed pool of
// kPoolSize samples, so that a short run shows the loss falling.
class FluxModel final : public TrainModel {
 public:
  static constexpr int64_t kPoolSize = 8;

  FluxModel(const models::FluxConfig& config, const tm::LoraOptions& lora, uint64_t seed,
            const TrainModelOptions& options)
      : config_(config), net_(config, lora), seed_(seed), options_(options) {}
  torch::nn::Module& module() override { return *net_; }
  int64_t tokens_per_sample() const override { return options_.seq_len + config_.text_tokens; }

  Result<torch::Tensor> loss(int64_t first, int64_t batch, const tm::BlockRunner& runner) override {
    std::vector<tm::FluxBatch> samples;
    for (int64_t i = 0; i < batch; ++i) samples.push_back(sample((first + i) % kPoolSize));
    tm::FluxBatch b;
    auto stack = [&](torch::Tensor tm::FluxBatch::*field) {
      std::vector<torch::Tensor> parts;
      for (const tm::FluxBatch& s : samples) parts.push_back(s.*field);
      return torch::cat(parts).to(options_.device, options_.dtype);
    };
    b.hidden_states = stack(&tm::FluxBatch::hidden_states);
    b.encoder_hidden_states = stack(&tm::FluxBatch::encoder_hidden_states);
    b.pooled_projections = stack(&tm::FluxBatch::pooled_projections);
    b.timestep = stack(&tm::FluxBatch::timestep);
    b.guidance = stack(&tm::FluxBatch::guidance);
    b.target = stack(&tm::FluxBatch::target);
    return net_->forward(b, runner);
  }

 private:
  // One sample drawn from its own generator, so it does not depend on the
  // global RNG state (dropout) or on which samples came before.
  tm::FluxBatch sample(int64_t index) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(splitmix64(seed_ ^ static_cast<uint64_t>(index)));
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat);
    const int64_t s = options_.seq_len;
    tm::FluxBatch b;
    const torch::Tensor x0 = at::randn({1, s, config_.in_channels}, gen, f32);
    const torch::Tensor noise = at::randn({1, s, config_.in_channels}, gen, f32);
    b.timestep = at::rand({1}, gen, f32);
    const torch::Tensor t = b.timestep.view({1, 1, 1});
    b.hidden_states = (1 - t) * x0 + t * noise;
    b.target = noise - x0;
    b.encoder_hidden_states = at::randn({1, config_.text_tokens, config_.joint_dim}, gen, f32);
    b.pooled_projections = at::randn({1, config_.pooled_dim}, gen, f32);
    b.guidance = torch::full({1}, 3.5, f32);
    return b;
  }

  models::FluxConfig config_;
  tm::FluxTransformer net_;
  uint64_t seed_;
  TrainModelOptions options_;
};

// QLoRA: every linear whose weight the planner's graph stores as NF4 is
// quantized, in the module's final dtype and device, as bitsandbytes
// quantizes a Linear4bit when it moves to the GPU. Returns how many.
int quantize_nf4_linears(torch::nn::Module& module, const graph::LayerGraph& graph, bool double_quant) {
  std::map<std::string, bool> nf4;
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& param : node.params) nf4[param.name] = param.dtype == graph::DType::kNF4;
  }
  int quantized = 0;
  for (const auto& item : module.named_modules()) {
    auto* linear = dynamic_cast<tm::LinearImpl*>(item.value().get());
    if (linear == nullptr) continue;
    const auto found = nf4.find(item.key() + ".weight");
    if (found == nf4.end() || !found->second) continue;
    linear->quantize_nf4(double_quant);
    ++quantized;
  }
  return quantized;
}

// PEFT keeps adapters in fp32 on a 16-bit model (get_peft_model's
// autocast_adapter_dtype=True), and the planner's graph says so with f32
// adapter parameters: those go back to fp32 after the module's move to its
// 16-bit dtype, and their layers do autocast's casts (LinearImpl). Only pure
// bf16 keeps them so (planner/memory/model_states.cc fp32_adapter): under mixed
// precision every parameter is 16-bit with an fp32 master copy.
void keep_fp32_adapters(torch::nn::Module& module, const graph::LayerGraph& graph, planner::Precision precision) {
  if (precision != planner::Precision::kBf16Pure) return;
  std::map<std::string, bool> fp32;
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& param : node.params) fp32[param.name] = param.dtype == graph::DType::kF32;
  }
  torch::NoGradGuard no_grad;
  for (const auto& item : module.named_modules()) {
    auto* linear = dynamic_cast<tm::LinearImpl*>(item.value().get());
    if (linear == nullptr || !linear->lora_a.defined()) continue;
    const auto found = fp32.find(item.key() + ".lora_A.weight");
    if (found == fp32.end() || !found->second) continue;
    linear->lora_a.set_data(linear->lora_a.to(torch::kFloat));
    linear->lora_b.set_data(linear->lora_b.to(torch::kFloat));
    linear->adapter_autocast = true;
  }
}

// An image classifier (ViT, ResNet) on synthetic images from a fixed pool of
// kPoolSize (image, label) samples, so that a short run shows the loss falling.
// The batch is held through backward, as a training loop holds its inputs (the
// Trainer's `inputs`): a frozen first layer keeps no pixels, the loop does.
template <typename Net>
class ImageClassifier final : public TrainModel {
 public:
  static constexpr int64_t kPoolSize = 8;

  // `fp32_pixels`: the batch comes in fp32 whatever the weights' dtype, as an image
  // processor hands it to the Trainer (models/vision.h VisionSpec::fp32_pixels).
  ImageClassifier(Net net, int64_t side, int64_t classes, uint64_t seed, const TrainModelOptions& options,
                  bool fp32_pixels = false)
      : side_(side), classes_(classes), net_(std::move(net)), seed_(seed), options_(options),
        pixel_dtype_(fp32_pixels ? torch::kFloat : options.dtype) {}
  torch::nn::Module& module() override { return *net_; }
  int64_t tokens_per_sample() const override { return options_.seq_len; }

  Result<torch::Tensor> loss(int64_t first, int64_t batch, const tm::BlockRunner& runner) override {
    std::vector<torch::Tensor> images;
    std::vector<int64_t> labels;
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t index = (first + i) % kPoolSize;
      auto gen = at::make_generator<at::CPUGeneratorImpl>(splitmix64(seed_ ^ static_cast<uint64_t>(index)));
      images.push_back(at::randn({1, 3, side_, side_}, gen, torch::TensorOptions().dtype(torch::kFloat)));
      labels.push_back(index % classes_);
    }
    pixels_ = torch::cat(images).to(options_.device, pixel_dtype_);
    labels_ = torch::tensor(labels, torch::kLong).to(options_.device);
    return net_->loss(pixels_, labels_, runner);
  }
  void release_outputs() override {
    pixels_ = torch::Tensor();
    labels_ = torch::Tensor();
  }
  void moved() override {
    if constexpr (requires { net_->restore_integer_buffers(); }) net_->restore_integer_buffers();
  }

 private:
  int64_t side_;
  int64_t classes_;
  Net net_;
  torch::Tensor pixels_, labels_;
  uint64_t seed_;
  TrainModelOptions options_;
  torch::ScalarType pixel_dtype_;
};

// EVA ViT-g (Blip2VisionModel) on synthetic images from a fixed pool of
// kPoolSize, its loss the mean of its output (the seed story's
// `outputs.mean()`). The batch is held through backward, as the seed's loop
// holds `batch`.
class EvaVitModel final : public TrainModel {
 public:
  static constexpr int64_t kPoolSize = 8;

  EvaVitModel(tm::Blip2VisionModel net, int64_t side, uint64_t seed, const TrainModelOptions& options)
      : side_(side), net_(std::move(net)), seed_(seed), options_(options) {}
  torch::nn::Module& module() override { return *net_; }
  int64_t tokens_per_sample() const override { return options_.seq_len; }

  Result<torch::Tensor> loss(int64_t first, int64_t batch, const tm::BlockRunner& runner) override {
    std::vector<torch::Tensor> images;
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t index = (first + i) % kPoolSize;
      auto gen = at::make_generator<at::CPUGeneratorImpl>(splitmix64(seed_ ^ static_cast<uint64_t>(index)));
      images.push_back(at::randn({1, 3, side_, side_}, gen, torch::TensorOptions().dtype(torch::kFloat)));
    }
    // The seed's batch.to(next(model_engine.parameters()).dtype).
    pixels_ = torch::cat(images).to(options_.device, options_.dtype);
    return net_->loss(pixels_, runner);
  }
  void release_outputs() override { pixels_ = torch::Tensor(); }

 private:
  int64_t side_;
  tm::Blip2VisionModel net_;
  torch::Tensor pixels_;
  uint64_t seed_;
  TrainModelOptions options_;
};

// LLaVA on synthetic samples: an image from a fixed pool of kPoolSize and
// tokens from the token source, the first image_tokens positions being the
// image placeholder (as LLaVA's prompt puts "<image>" first).
class LlavaModel final : public TrainModel {
 public:
  static constexpr int64_t kPoolSize = 8;

  LlavaModel(const ExecutableModel& model, const tm::LoraOptions& lora, TokenSource data, uint64_t seed,
             const TrainModelOptions& options)
      : image_(model.image), image_tokens_(model.llava.image_tokens), image_token_(model.image_token),
        net_(model.llava, model.image_token, lora), data_(std::move(data)), seed_(seed), options_(options) {}
  torch::nn::Module& module() override { return *net_; }
  int64_t tokens_per_sample() const override { return options_.seq_len; }

  Result<torch::Tensor> loss(int64_t first, int64_t batch, const tm::BlockRunner& runner) override {
    if (options_.seq_len <= image_tokens_ + 1) {
      return Status::invalid_input("seq_len " + std::to_string(options_.seq_len) +
                                   " leaves no text after the " + std::to_string(image_tokens_) +
                                   " image tokens (expected more)");
    }
    std::vector<torch::Tensor> images;
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t index = first + i;
      auto gen = at::make_generator<at::CPUGeneratorImpl>(splitmix64(seed_ ^ static_cast<uint64_t>(index % kPoolSize)));
      images.push_back(at::randn({1, 3, image_, image_}, gen, torch::TensorOptions().dtype(torch::kFloat)));
      Result<std::vector<int64_t>> text = data_.sample(index, options_.seq_len);
      if (!text.is_ok()) return text.status();
      for (int64_t t = 0; t < options_.seq_len; ++t) {
        const int64_t id = text.value()[static_cast<size_t>(t)];
        // Only the placeholders carry the image token: a text token that draws
        // its id becomes 0, or masked_scatter would place a feature there.
        ids.push_back(t < image_tokens_ ? image_token_ : (id == image_token_ ? 0 : id));
      }
    }
    pixels_ = torch::cat(images).to(options_.device, options_.dtype);
    input_ = torch::tensor(ids, torch::kLong).view({batch, options_.seq_len}).to(options_.device);
    auto [loss, logits] = net_->loss_and_logits(pixels_, input_, runner);
    if (options_.keep_logits) logits_ = logits;
    return loss;
  }
  void release_outputs() override {
    logits_ = torch::Tensor();
    pixels_ = torch::Tensor();
    input_ = torch::Tensor();
  }

 private:
  int64_t image_;
  int64_t image_tokens_;
  int64_t image_token_;
  tm::LlavaForConditionalGeneration net_;
  torch::Tensor pixels_, input_, logits_;  // held through backward, as a training loop holds batch and output
  TokenSource data_;
  uint64_t seed_;
  TrainModelOptions options_;
};

// A sequence classifier (BERT, RoBERTa) on synthetic token ids from a fixed
// pool of kPoolSize (sequence, label) samples, so that a short run shows the
// loss falling. Token types are zeros, as a tokenizer gives one sentence; the
// ids avoid the padding token. The batch (input_ids, token_type_ids, labels)
// is held through backward, as a training loop holds its inputs.
class SequenceClassifier final : public TrainModel {
 public:
  static constexpr int64_t kPoolSize = 8;

  SequenceClassifier(const models::BertConfig& config, const tm::LoraOptions& lora, uint64_t seed,
                     const TrainModelOptions& options)
      : config_(config), net_(config, lora), seed_(seed), options_(options) {}
  torch::nn::Module& module() override { return *net_; }
  int64_t tokens_per_sample() const override { return options_.seq_len; }

  Result<torch::Tensor> loss(int64_t first, int64_t batch, const tm::BlockRunner& runner) override {
    std::vector<torch::Tensor> ids;
    std::vector<int64_t> labels;
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t index = (first + i) % kPoolSize;
      auto gen = at::make_generator<at::CPUGeneratorImpl>(splitmix64(seed_ ^ static_cast<uint64_t>(index)));
      // Ids in [0, vocab - 1), those at or past the padding id moved up by one.
      torch::Tensor sample = at::randint(config_.vocab - 1, {1, options_.seq_len}, gen, torch::kLong);
      ids.push_back(sample + sample.ge(config_.pad_token).to(torch::kLong));
      labels.push_back(index % config_.labels);
    }
    input_ids_ = torch::cat(ids).to(options_.device);
    token_types_ = torch::zeros_like(input_ids_);
    labels_ = torch::tensor(labels, torch::kLong).to(options_.device);
    return net_->loss(input_ids_, token_types_, labels_, runner);
  }
  void release_outputs() override {
    input_ids_ = torch::Tensor();
    token_types_ = torch::Tensor();
    labels_ = torch::Tensor();
  }

 private:
  models::BertConfig config_;
  tm::BertForSequenceClassification net_;
  torch::Tensor input_ids_, token_types_, labels_;
  uint64_t seed_;
  TrainModelOptions options_;
};

// CLIPModel on synthetic image-text pairs from a fixed pool of kPoolSize:
// pair i is image i and text i, the text's last token its EOS (the pooled
// one), the others drawn below the vocabulary's size without the EOS id. The
// batch is held through backward, as a training loop holds its inputs.
class ImageTextPairs final : public TrainModel {
 public:
  static constexpr int64_t kPoolSize = 8;

  ImageTextPairs(const ExecutableModel& model, const tm::LoraOptions& lora, uint64_t seed,
                 const TrainModelOptions& options)
      : image_(model.image), clip_(model.clip), net_(model.clip, lora), seed_(seed), options_(options) {}
  torch::nn::Module& module() override { return *net_; }
  int64_t tokens_per_sample() const override { return options_.seq_len; }

  Result<torch::Tensor> loss(int64_t first, int64_t batch, const tm::BlockRunner& runner) override {
    const models::ClipConfig& c = clip_.config;
    // eos_token_id 2 pools the highest id: the last token is then vocab - 1.
    const int64_t eos = clip_.eos_token == 2 ? c.text_vocab - 1 : clip_.eos_token;
    std::vector<torch::Tensor> images, texts;
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t index = (first + i) % kPoolSize;
      auto gen = at::make_generator<at::CPUGeneratorImpl>(splitmix64(seed_ ^ static_cast<uint64_t>(index)));
      images.push_back(at::randn({1, 3, image_, image_}, gen, torch::TensorOptions().dtype(torch::kFloat)));
      torch::Tensor ids = at::randint(c.text_vocab - 1, {1, c.text_tokens}, gen, torch::kLong);
      ids = ids + ids.ge(eos).to(torch::kLong);  // every id but the EOS
      ids.select(1, c.text_tokens - 1).fill_(eos);
      texts.push_back(ids);
    }
    // The image processor's fp32 batch (VisionSpec::fp32_pixels).
    pixels_ = torch::cat(images).to(options_.device, c.vision.fp32_pixels ? torch::kFloat : options_.dtype);
    input_ids_ = torch::cat(texts).to(options_.device);
    return net_->loss(pixels_, input_ids_, runner);
  }
  void release_outputs() override {
    pixels_ = torch::Tensor();
    input_ids_ = torch::Tensor();
  }

 private:
  int64_t image_;
  models::HfClip clip_;
  tm::ClipModel net_;
  torch::Tensor pixels_, input_ids_;
  uint64_t seed_;
  TrainModelOptions options_;
};

// What a family's builder gets: the model, the plan and the run.
struct BuildInputs {
  const ExecutableModel& model;
  const planner::Plan& plan;
  const RunOptions& run;
  const TrainModelOptions& options;
  const graph::LayerGraph& trained_graph;
  int64_t lora_rank() const { return plan.settings.lora.rank; }
  tm::LoraOptions lora(tm::LoraOptions defaults) const { return lora_options(plan, trained_graph, std::move(defaults)); }
};

Result<std::unique_ptr<TrainModel>> build_llama(const BuildInputs& in) {
  TokenSource data = TokenSource::synthetic(in.model.llama.vocab, in.run.seed);
  if (in.run.data != "synthetic") {
    Result<TokenSource> file =
        TokenSource::open_file(in.run.data, in.run.token_bytes, in.model.llama.vocab, in.options.seq_len);
    if (!file.is_ok()) return file.status();
    data = file.value();
  }
  const bool moe = in.model.llama.moe.experts > 0;
  const tm::LoraOptions targets = in.lora(moe ? tm::moe_lora(in.lora_rank()) : tm::llama_lora(in.lora_rank()));
  auto model = std::make_unique<LlamaModel>(in.model.llama, targets, std::move(data), in.options);
  // PEFT's ParamWrapper on the experts and routers the planner wrapped, at lora_alpha / r
  // (gate_up_proj's doubled rank and alpha keep the same scale).
  if (moe && in.plan.settings.mode != planner::TrainMode::kFull) {
    tm::wrap_param_lora(model->module(), in.trained_graph, targets.alpha / static_cast<double>(in.lora_rank()));
  }
  return std::unique_ptr<TrainModel>(std::move(model));
}

Result<std::unique_ptr<TrainModel>> build_flux(const BuildInputs& in) {
  return std::unique_ptr<TrainModel>(std::make_unique<FluxModel>(
      in.model.flux, in.lora(tm::flux_lora(in.lora_rank())), in.run.seed, in.options));
}

Result<std::unique_ptr<TrainModel>> build_vit(const BuildInputs& in) {
  if (in.model.vit.style == models::VisionStyle::kBlip2) {
    tm::Blip2VisionModel net(in.model.vit, in.lora(tm::eva_vit_lora(in.lora_rank())));
    return std::unique_ptr<TrainModel>(std::make_unique<EvaVitModel>(std::move(net), in.model.image, in.run.seed, in.options));
  }
  tm::VitForImageClassification net(in.model.vit, in.model.classes, in.lora(tm::vit_lora(in.lora_rank())));
  return std::unique_ptr<TrainModel>(std::make_unique<ImageClassifier<tm::VitForImageClassification>>(
      std::move(net), in.model.image, in.model.classes, in.run.seed, in.options, in.model.vit.fp32_pixels));
}

Result<std::unique_ptr<TrainModel>> build_llava(const BuildInputs& in) {
  return std::unique_ptr<TrainModel>(
      std::make_unique<LlavaModel>(in.model, in.lora(tm::llama_lora(in.lora_rank())),
                                   TokenSource::synthetic(in.model.llava.text.vocab, in.run.seed), in.run.seed,
                                   in.options));
}

Result<std::unique_ptr<TrainModel>> build_resnet(const BuildInputs& in) {
  // Pixels a side: 32 x sqrt(S), S counting the final 1/32 feature map.
  const int64_t side = 32 * static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(in.options.seq_len))));
  return std::unique_ptr<TrainModel>(std::make_unique<ImageClassifier<tm::ResNet>>(
      tm::ResNet(in.model.resnet), side, in.model.resnet.classes, in.run.seed, in.options));
}

Result<std::unique_ptr<TrainModel>> build_bert(const BuildInputs& in) {
  models::BertConfig config = in.model.bert;
  // The plan's --dropout overrides every dropout, as in the planner's graph (dropout_p).
  if (const std::optional<double> p = in.plan.settings.dropout) {
    config.hidden_dropout = config.attention_dropout = config.classifier_dropout = *p;
  }
  if (config.attention_dropout > 0 && in.options.device.is_cpu()) {
    // aten sdp_utils_cpp: the CPU flash kernel takes no dropout, so SDPA falls
    // back to its math path, which keeps the probabilities and their mask.
    return Status::unsupported(
        in.plan.model + ": attention dropout " + std::to_string(config.attention_dropout) +
        " runs on LibTorch's CPU SDPA math path, which keeps the [B, heads, S, S] probabilities "
        "that the priced fused kernel does not (expected a GPU, or --dropout 0, or a config with "
        "attention_probs_dropout_prob 0)");
  }
  return std::unique_ptr<TrainModel>(std::make_unique<SequenceClassifier>(
      config, in.lora(tm::bert_lora(in.lora_rank())), in.run.seed, in.options));
}

Result<std::unique_ptr<TrainModel>> build_clip(const BuildInputs& in) {
  if (in.plan.settings.dropout.value_or(0) > 0) {
    return Status::unsupported(in.plan.model +
                               ": settings.dropout: the LibTorch CLIP runs no dropout, as CLIP's "
                               "configs have none (expected 0)");
  }
  return std::unique_ptr<TrainModel>(std::make_unique<ImageTextPairs>(
      in.model, in.lora(tm::clip_lora(in.lora_rank())), in.run.seed, in.options));
}

// Each family's training model, one row per family in ModelFamily order; the
// rest of the family's row (names, data, modes) is model_families()'s.
struct FamilyBuilder {
  ModelFamily family;
  Result<std::unique_ptr<TrainModel>> (*build)(const BuildInputs& inputs);
};
constexpr FamilyBuilder kBuilders[] = {
    {ModelFamily::kLlama, build_llama}, {ModelFamily::kFlux, build_flux},   {ModelFamily::kVit, build_vit},
    {ModelFamily::kLlava, build_llava}, {ModelFamily::kResNet, build_resnet}, {ModelFamily::kBert, build_bert},
    {ModelFamily::kClip, build_clip},
};
constexpr bool builders_in_family_order() {
  for (size_t i = 0; i < std::size(kBuilders); ++i) {
    if (kBuilders[i].family != static_cast<ModelFamily>(i)) return false;
  }
  return std::size(kBuilders) == kModelFamilyCount;
}
static_assert(builders_in_family_order(), "one builder per ModelFamily, in its order");

// What the family's row says a run of it needs, before anything is built.
Status check_family(const ModelFamilyInfo& family, const planner::Plan& plan, const RunOptions& run) {
  if (family.synthetic_data != nullptr && run.data != "synthetic") {
    return Status::unsupported(run.data + ": " + family.name + " trains on synthetic " +
                               family.synthetic_data + " only (expected --data synthetic)");
  }
  if (family.full_only && plan.settings.mode != planner::TrainMode::kFull) {
    return Status::unsupported(plan.model + ": settings.mode: the executor trains " + family.name +
                               " fully (expected full)");
  }
  return Status::ok();
}

}  // namespace

std::vector<std::pair<std::string, torch::Tensor>> TrainModel::trainable() {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (auto& item : module().named_parameters()) {
    if (item.value().requires_grad()) out.emplace_back(item.key(), item.value());
  }
  return out;
}

Result<std::unique_ptr<TrainModel>> make_train_model(const ExecutableModel& model, const planner::Plan& plan,
                                                     const graph::LayerGraph& trained_graph, const RunOptions& run,
                                                     const TrainModelOptions& options) {
  if (Status s = check_family(model_family(model.family), plan, run); !s.is_ok()) return s;
  Result<std::unique_ptr<TrainModel>> built =
      kBuilders[static_cast<size_t>(model.family)].build(BuildInputs{model, plan, run, options, trained_graph});
  if (!built.is_ok()) return built.status();
  std::unique_ptr<TrainModel> out = std::move(built.value());
  if (Status s = apply_trainability(out->module(), trained_graph, plan.model); !s.is_ok()) return s;
  // A Hugging Face directory with weights: train from them (frozen and
  // trainable alike); otherwise the seeded random initialisation stands.
  // A bitsandbytes-quantized checkpoint's NF4 weights are read after the
  // module is quantized, into its NF4 storage (load_nf4_states).
  std::vector<std::string> nf4_weights;
  if (models::is_hf_model_path(plan.settings.model)) {
    Result<bool> has_weights = has_safetensors(plan.settings.model);
    if (!has_weights.is_ok()) return has_weights.status();
    if (has_weights.value()) {
      Result<LoadedWeights> loaded = load_safetensors(out->module(), plan.settings.model);
      if (!loaded.is_ok()) return loaded.status();
      out->weights_source = loaded->source;
      nf4_weights = loaded->nf4_weights;
    }
  }
  out->module().to(options.device, options.dtype);
  out->moved();
  keep_fp32_adapters(out->module(), trained_graph, plan.settings.precision);
  // The plan priced the forward under autocast over the bf16 weights (the Trainer's;
  // the top of the band when the stack leaves it open): run it so.
  if (planner::autocast_matters(plan.settings) && planner::resolve_stack(plan.settings).top.autocast) {
    tm::enable_autocast(out->module());
  }
  if (plan.settings.mode == planner::TrainMode::kQlora &&
      quantize_nf4_linears(out->module(), trained_graph, plan.settings.nf4_double_quant) == 0) {
    return Status::internal(
        plan.model +
        ": QLoRA: no linear of the module is NF4 in the planner's graph (a bug in models/)");
  }
  if (Status s = load_nf4_states(out->module(), plan.settings.model, nf4_weights); !s.is_ok()) return s;
  out->module().train();
  return out;
}

}  // namespace headroom::executor
