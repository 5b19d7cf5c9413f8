// Flux-style MMDiT transformers (diffusers FluxTransformer2DModel) as LayerGraphs:
// the config both the graph builder and the LibTorch modules (models/torch/)
// are built from, the published FLUX.1 Kontext [dev] size and a tiny CPU size.
#pragma once

#include <cstdint>

#include "graph/layer_graph.h"
#include "models/zoo.h"

namespace headroom::models {

struct FluxConfig {
  int64_t hidden = 0;         // num_attention_heads * attention_head_dim
  int64_t heads = 0;          // num_attention_heads
  int64_t head_dim = 0;       // attention_head_dim
  int64_t double_blocks = 0;  // num_layers
  int64_t single_blocks = 0;  // num_single_layers
  int64_t in_channels = 0;    // packed latent channels per token
  int64_t joint_dim = 0;      // joint_attention_dim (T5 width)
  int64_t pooled_dim = 0;     // pooled_projection_dim (CLIP pooled width)
  int64_t mlp = 0;            // FeedForward width (mult 4)
  int64_t time_channels = 0;  // sinusoidal timestep projection channels
  int64_t text_tokens = 0;    // T5 tokens per sample (fixed)
  // q/k RMSNorms as diffusers' RMSNorm Python ops (float32 copy of x, rstd and a
  // float32 normalized tensor kept), as read from a diffusers config.json; false:
  // the fused kernel the executor's LibTorch module uses.
  bool python_qk_norm = false;
};

// black-forest-labs/FLUX.1-Kontext-dev transformer/config.json: in_channels 64,
// num_layers 19, num_single_layers 38, num_attention_heads 24,
// attention_head_dim 128, joint_attention_dim 4096, pooled_projection_dim 768,
// guidance_embeds true, patch_size 1, axes_dims_rope [16, 56, 56]. FeedForward
// mult 4 (12288), timestep projection 256 channels; max T5 length 512.
inline constexpr FluxConfig kFluxKontextDev{3072, 24, 128, 19, 38, 64, 4096, 768, 12288, 256, 512, false};

// "tiny-flux": the same architecture small enough to train on a CPU in tests.
inline constexpr FluxConfig kTinyFlux{64, 2, 32, 2, 2, 16, 32, 16, 256, 32, 8, false};

graph::LayerGraph build_flux(const FluxConfig& config, const ZooOptions& options);

}  // namespace headroom::models
