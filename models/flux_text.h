// Flux's frozen text encoders (CLIP-L text, T5-XXL encoder) as single frozen
// nodes, for runs that encode prompts on the fly instead of precomputing them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/graph_builder.h"

namespace headroom::models {

// The sizes a transformers CLIPTextModel's parameters follow (CLIPTextConfig), and
// `projection` > 0 for CLIPTextModelWithProjection's bias-free text_projection.
struct ClipTextConfig {
  int64_t hidden = 768;
  int64_t mlp = 3072;
  int64_t layers = 12;
  int64_t vocab = 49408;
  int64_t positions = 77;
  int64_t projection = 0;
};
// openai/clip-vit-large-patch14 text_config (FLUX.1 and SDXL text_encoder/config.json):
// 123,060,480 parameters.
inline constexpr ClipTextConfig kClipL{};
// SDXL's text_encoder_2/config.json (CLIPTextModelWithProjection, OpenCLIP ViT-bigG/14's
// text tower): hidden 1280, intermediate 5120, 32 layers, projection_dim 1280:
// 694,659,840 parameters.
inline constexpr ClipTextConfig kClipBigG{1280, 5120, 32, 49408, 77, 1280};

// Every parameter of CLIP text model `prefix` (transformers' names under
// "<prefix>.text_model."), frozen, in the builder's parameter dtype.
std::vector<Param> frozen_clip_text_params(const GraphBuilder& b, const std::string& prefix,
                                           const ClipTextConfig& c);
// Elements over `params`.
int64_t param_elements(const std::vector<Param>& params);
// A frozen parameter `name` of `shape`, in the builder's parameter dtype.
Param frozen_param(const GraphBuilder& b, const std::string& name, std::vector<int64_t> shape);

// Adds a non-checkpointable "text_encoders" block: int64 token inputs, node
// "text_encoder" (CLIP ViT-L/14 text model, pooled [B, 768]) and node
// "text_encoder_2" (T5-XXL encoder, [B, text_tokens, 4096]), with every
// parameter frozen (trainable = false). Returns {pooled, encoder_hidden_states}.
std::pair<std::string, std::string> add_flux_text_encoders(GraphBuilder& b, int64_t text_tokens);

}  // namespace headroom::models
