// Which models the LibTorch executor can train, as the configs its modules
// take (models/torch/). Torch-free, so `headroom run` can refuse a plan with a
// clear message in every build and tests hold the mapping without LibTorch.
#pragma once

#include <string>
#include <string_view>

#include "graph/status.h"
#include "models/flux.h"
#include "models/llama.h"
#include "models/resnet.h"
#include "models/vision.h"
#include "models/zoo_builders.h"

namespace headroom::executor {

enum class ModelFamily { kLlama, kFlux, kVit, kLlava, kResNet };

struct ExecutableModel {
  ModelFamily family = ModelFamily::kLlama;
  models::LlamaConfig llama;  // family kLlama
  models::FluxConfig flux;    // family kFlux
  models::VisionSpec vit;     // family kVit: ViTForImageClassification's encoder
  int64_t classes = 0;        // family kVit
  int64_t image = 0;          // families kVit, kLlava: pixels per side
  models::LlavaConfig llava;  // family kLlava
  int64_t image_token = 0;    // family kLlava: the placeholder id (image_token_index)
  models::ResNetConfig resnet;  // family kResNet (torchvision names)
};

// `model` as a Plan names it: a zoo name (tiny-llama, llama-3-8b, llama-3.1-8b,
// mistral-7b, tiny-flux, flux-kontext-dev, tiny-resnet, resnet-50) or a Hugging Face llama / mistral /
// qwen2 model directory or config.json whose features the module has, or a
// Hugging Face ViTForImageClassification (model_type vit) or
// LlavaForConditionalGeneration (model_type llava, a CLIP tower and a Llama). Anything
// else is an error naming `origin`, the field "model" and what is supported.
Result<ExecutableModel> executable_model(const std::string& model, std::string_view origin);

}  // namespace headroom::executor
