// Which models the LibTorch executor can train, as the configs its modules
// take (models/torch/), and what a run of each needs: one row per trainable
// family in model_families(). Torch-free, so `headroom run` can refuse a plan
// with a clear message in every build and tests hold the mapping without
// LibTorch. Each family's training model is its row in executor/train_model.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "graph/status.h"
#include "models/flux.h"
#include "models/hf_fields.h"
#include "models/llama.h"
#include "models/resnet.h"
#include "models/vision.h"
#include "models/zoo_builders.h"

namespace headroom::executor {

// In model_families() order.
enum class ModelFamily { kLlama, kFlux, kVit, kLlava, kResNet, kBert, kClip };
inline constexpr size_t kModelFamilyCount = 7;

struct ExecutableModel {
  ModelFamily family = ModelFamily::kLlama;
  models::LlamaConfig llama;  // family kLlama
  models::FluxConfig flux;    // family kFlux
  // family kVit: ViTForImageClassification's encoder (style kVit), or EVA
  // ViT-g as Blip2VisionModel with its feature loss (style kBlip2)
  models::VisionSpec vit;
  int64_t classes = 0;        // family kVit, style kVit
  int64_t image = 0;          // families kVit, kLlava, kClip: pixels per side
  models::LlavaConfig llava;  // family kLlava
  int64_t image_token = 0;    // family kLlava: the placeholder id (image_token_index)
  models::ResNetConfig resnet;  // family kResNet (torchvision names)
  models::BertConfig bert;      // family kBert: BertForSequenceClassification or RoBERTa's
  models::HfClip clip;          // family kClip: CLIPModel, both towers
};

// A Hugging Face config.json of one of a family's model types, as it is read.
struct HfConfig {
  const models::HfFields& fields;
  const std::string& type;   // its model_type
  const std::string& path;   // the config.json
  const std::string& model;  // the model as the plan names it
  std::string_view origin;   // the plan, for messages
};

// One trainable family: how its models are named and read, and what a run of
// it needs (make_train_model and check_executable check these).
struct ModelFamilyInfo {
  ModelFamily family;
  const char* name;  // in messages: "Llama", "LLaVA"
  std::vector<std::pair<std::string, ExecutableModel>> zoo;  // built-in models, by zoo name
  std::vector<std::string> hf_model_types;                    // config.json model_type values it reads
  Result<ExecutableModel> (*read_hf)(const HfConfig& config);  // reads those; null without any
  // What it trains on ("latents", "images"): synthetic data only, no token file
  // (--data). Null: token files too.
  const char* synthetic_data;
  bool full_only;  // trains every parameter (settings.mode full), no adapters
  bool min_two_tokens;  // a causal LM checked by check_executable: each token predicts the next
  // Its module runs every graph block, embeddings and head included, through
  // the BlockRunner, so ZeRO-3 can gather each block's parameters around it.
  bool runs_every_block;
};

// Every trainable family, in ModelFamily order.
const std::vector<ModelFamilyInfo>& model_families();
const ModelFamilyInfo& model_family(ModelFamily family);

// `model` as a Plan names it: a zoo name of a family's row (tiny-llama,
// llama-3-8b, tiny-flux, resnet-50, ...) or a Hugging Face model directory or
// config.json of one of the families' model types (llama / mistral / qwen2,
// vit, llava, bert / roberta, clip) whose features the module has. Anything else is an error naming
// `origin`, the field "model" and what is supported.
Result<ExecutableModel> executable_model(const std::string& model, std::string_view origin);

}  // namespace headroom::executor
