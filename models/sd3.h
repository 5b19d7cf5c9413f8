// Stable Diffusion 3 / 3.5 MMDiT transformers (diffusers SD3Transformer2DModel)
// as LayerGraphs, read from a diffusers config.json (models/hf_sd3.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "graph/layer_graph.h"
#include "models/mmdit_parts.h"
#include "models/zoo.h"

namespace headroom::models {

struct Sd3Config {
  int64_t hidden = 0;         // num_attention_heads * attention_head_dim (= caption_projection_dim)
  int64_t heads = 0;          // num_attention_heads
  int64_t head_dim = 0;       // attention_head_dim
  int64_t layers = 0;         // num_layers (JointTransformerBlock; the last is context_pre_only)
  int64_t in_channels = 0;    // latent channels (16)
  int64_t out_channels = 0;   // latent channels out (16)
  int64_t patch = 0;          // patch_size (2): PatchEmbed's Conv2d kernel and stride
  int64_t joint_dim = 0;      // joint_attention_dim (T5 width; CLIP embeddings are padded to it)
  int64_t pooled_dim = 0;     // pooled_projection_dim (CLIP-L + CLIP-G pooled, 2048)
  int64_t mlp = 0;            // FeedForward width (mult 4)
  int64_t time_channels = 0;  // Timesteps projection channels (256)
  int64_t pos_embed_max = 0;  // pos_embed_max_size: the side of the persistent sincos table
  int64_t clip_tokens = 0;    // CLIP tokens per sample (77, padded to joint_dim and concatenated)
  int64_t t5_tokens = 0;      // T5 tokens per sample (the training script's --max_sequence_length)
  std::vector<int64_t> dual_attention_layers;  // blocks with a second, image-only attention (attn2)
  QkNorm qk_norm = QkNorm::kNone;
};

// The sizes SD3Transformer2DModel.__init__ defaults to where a config leaves a
// key out (diffusers 0.39.0 transformer_sd3.py); T5 length 77 is
// train_dreambooth_lora_sd3.py's --max_sequence_length default.
Sd3Config sd3_default_config();

// The published transformers (diffusers-format transformer/config.json of
// stabilityai/stable-diffusion-3-medium-diffusers, stable-diffusion-3.5-medium,
// stable-diffusion-3.5-large; tests/data/hf/sd3*).
Sd3Config sd3_medium_config();
Sd3Config sd35_medium_config();
Sd3Config sd35_large_config();

graph::LayerGraph build_sd3(const Sd3Config& config, const ZooOptions& options);

}  // namespace headroom::models
