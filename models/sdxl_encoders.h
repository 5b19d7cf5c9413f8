// The VAE and the two CLIP text encoders diffusers' SDXL LoRA script keeps on the GPU
// and runs on every batch before the UNet (examples/text_to_image/
// train_text_to_image_lora_sdxl.py, 0.39.0; docs/models.md, "Stable Diffusion XL's
// UNet", "Resident encoders"), as frozen nodes the way Flux's text encoders are
// (models/flux_text.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/graph_builder.h"

namespace headroom::models {

// An AutoencoderKL of DownEncoderBlock2D / UpDecoderBlock2D levels (diffusers
// models/autoencoders/autoencoder_kl.py, vae.py Encoder and Decoder).
struct VaeConfig {
  std::vector<int64_t> channels;  // block_out_channels
  int64_t layers_per_block = 2;
  int64_t in_channels = 3;
  int64_t latent_channels = 4;
};

// stabilityai/stable-diffusion-xl-base-1.0 vae/config.json: 83,653,863 parameters.
VaeConfig sdxl_vae_config();

// Every parameter of the AutoencoderKL (encoder, quant_conv, decoder,
// post_quant_conv), frozen, under "vae.": resident though only the encoder runs.
std::vector<Param> frozen_vae_params(const GraphBuilder& b, const VaeConfig& c);

// Elements live at the peak of Encoder.forward under no autograd, beyond its input
// and its output, per latent position of one sample (the encoder's level l holds
// 4^(levels-1-l) latent positions per position): what eager PyTorch holds there
// (a down block's input, and ResnetBlock2D's input, hidden and residual sum beside
// the division's output).
int64_t vae_encode_peak_per_latent_position(const VaeConfig& c);
// Forward FLOPs of the encoder per latent position of one sample (its convolutions).
int64_t vae_encode_flops_per_latent_position(const VaeConfig& c);

struct SdxlEncoded {
  std::string prompt_embeds;  // [B, 77, 768 + 1280]: both encoders' penultimate states
  std::string text_embeds;    // [B, 1280]: text_encoder_2's pooled projection
};

// A non-checkpointable first block "encoders": fp32 pixel values [B, 3, H, W] (H*W =
// 64 latent positions each) through the VAE (fp32, its latents in the compute dtype),
// the two tokenizers' [B, 77] ids through CLIP-L and CLIP-bigG (compute dtype), the
// concatenation encode_prompt makes. `latent_positions` is B x the latent's positions.
SdxlEncoded add_sdxl_encoders(GraphBuilder& b, const SizeExpr& latent_positions);

}  // namespace headroom::models
