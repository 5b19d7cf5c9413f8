// Op sequences of diffusers' UNet2DConditionModel (diffusers 0.39.0): GroupNorm,
// Conv2d, ResnetBlock2D (models/resnet.py), Transformer2DModel with linear
// projections and BasicTransformerBlock (models/transformers/transformer_2d.py,
// models/attention.py, AttnProcessor2_0 in models/attention_processor.py, GEGLU in
// models/activations.py), Downsample2D and Upsample2D (downsampling.py,
// upsampling.py). What each keeps: docs/models.md, "Stable Diffusion XL".
//
// Sizes: a UNet of `levels` resolutions runs its deepest feature maps at S =
// (latent side / 2^(levels-1))^2 positions per sample; level l (0 = the latent's
// own resolution) has 4^(levels-1-l) S positions.
#pragma once

#include <cstdint>
#include <string>

#include "models/graph_builder.h"
#include "models/zoo.h"

namespace headroom::models {

struct UnetContext {
  GraphBuilder& b;
  const ZooOptions& options;
  int64_t levels = 0;       // len(block_out_channels)
  int64_t groups = 0;       // norm_num_groups
  int64_t cross_dim = 0;    // cross_attention_dim: encoder_hidden_states' width
  int64_t text_tokens = 0;  // encoder_hidden_states' tokens per sample (77)
  int64_t temb_dim = 0;     // the time embedding's width (4 x block_out_channels[0])
  std::string temb;         // the [B, temb_dim] embedding every resnet reads
  std::string context;      // encoder_hidden_states [B, text_tokens, cross_dim]
};

// Positions per sample of level `level`, in units of S.
int64_t unet_positions(const UnetContext& c, int64_t level);
// B x positions of `level` (token rows of a Transformer2DModel there).
SizeExpr unet_rows(const UnetContext& c, int64_t level);
// Elements of a [B, channels, H, W] map at `level`.
SizeExpr unet_map(const UnetContext& c, int64_t level, int64_t channels);

// nn.GroupNorm(groups, channels) over a map at `level`: keeps x, and the fp32
// per-(sample, group) mean and rstd.
std::string unet_group_norm(UnetContext& c, const std::string& module, const std::string& x, int64_t level,
                            int64_t channels);
// nn.Conv2d(in, out, kernel) with bias writing a map at `out_level` (its input's level, or
// one deeper: stride 2). Keeps its input whenever it is on the graph.
std::string unet_conv(UnetContext& c, const std::string& module, const std::string& x, int64_t out_level,
                      int64_t in, int64_t out, int64_t kernel);
// ResnetBlock2D (time_embedding_norm "default", output_scale_factor 1) as block `module`.
std::string unet_resnet(UnetContext& c, const std::string& module, const std::string& x, int64_t level,
                        int64_t in, int64_t out);
// Transformer2DModel (use_linear_projection) of `layers` BasicTransformerBlocks
// with `heads` heads over `channels`, at `level`.
std::string unet_transformer(UnetContext& c, const std::string& module, const std::string& x, int64_t level,
                             int64_t channels, int64_t heads, int64_t layers);
// Downsample2D (a 3x3 stride-2 conv, from `level` to level + 1) and Upsample2D
// (nearest x2 interpolation, then a 3x3 conv, from `level` to level - 1).
std::string unet_downsample(UnetContext& c, const std::string& module, const std::string& x, int64_t level,
                            int64_t channels);
std::string unet_upsample(UnetContext& c, const std::string& module, const std::string& x, int64_t level,
                          int64_t channels);

}  // namespace headroom::models
