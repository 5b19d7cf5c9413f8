// diffusers' UNet2DConditionModel as Stable Diffusion XL configures it
// (stabilityai/stable-diffusion-xl-base-1.0 unet/config.json), read from a
// diffusers config.json by models/hf_unet.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/layer_graph.h"
#include "models/zoo.h"

namespace headroom::models {

struct UnetConfig {
  int64_t in_channels = 4;
  int64_t out_channels = 4;
  std::vector<int64_t> channels;            // block_out_channels, one per level
  std::vector<bool> cross_attention_down;   // per level: CrossAttnDownBlock2D, else DownBlock2D
  std::vector<bool> cross_attention_up;     // per up block (deepest first): CrossAttnUpBlock2D, else UpBlock2D
  std::vector<int64_t> transformer_layers;  // transformer_layers_per_block, per level (the mid block: the last)
  std::vector<int64_t> heads;               // heads per level (the config's attention_head_dim: see hf_unet.cc)
  int64_t layers_per_block = 2;             // resnets per down block (up blocks: one more)
  int64_t groups = 32;                      // norm_num_groups
  int64_t cross_dim = 2048;                 // cross_attention_dim
  int64_t addition_time_dim = 256;          // addition_time_embed_dim: Timesteps width per time id
  int64_t addition_input_dim = 2816;        // projection_class_embeddings_input_dim (text_embeds + 6 time ids)
  int64_t text_tokens = 77;                 // encoder_hidden_states' tokens (CLIP's max length)
};

// The six add_time_ids SDXL's pipeline and trainers pass (original size, crop
// top-left, target size; diffusers' compute_time_ids).
inline constexpr int64_t kSdxlTimeIds = 6;

// stabilityai/stable-diffusion-xl-base-1.0's UNet: 2,567,463,684 parameters
// (sum of numel over UNet2DConditionModel(**config).parameters(), diffusers 0.39.0).
UnetConfig sdxl_base_unet_config();

// train_text_to_image_lora_sdxl.py's LoraConfig target_modules: every attention's
// projections (attn1 and attn2 of each BasicTransformerBlock).
std::vector<std::string> sdxl_lora_targets();

// The graph of one training forward: the inputs `sample` [B, in, h, w],
// `timestep`, `encoder_hidden_states` [B, 77, cross_dim], `text_embeds` and
// `time_ids`, and the epsilon MSE of train_text_to_image_lora_sdxl.py against
// `target`. S = (h / 2^(levels-1))^2.
graph::LayerGraph build_unet(const UnetConfig& config, const ZooOptions& options);

}  // namespace headroom::models
