// Vision transformer encoders (HF ViTModel, CLIPVisionModel, Blip2VisionModel)
// built as blocks of a LayerGraph; used by the ViT zoo entries and by LLaVA.
#pragma once

#include <cstdint>
#include <string>

#include "models/graph_builder.h"
#include "models/zoo.h"

namespace headroom::models {

enum class VisionStyle {
  kVit,    // HF ViTModel: attention.attention.query/key/value, exact GELU
  kClip,   // HF CLIPVisionModel: self_attn.q_proj/k_proj/v_proj/out_proj, quick_gelu
  kBlip2,  // HF Blip2VisionModel (EVA ViT-g): fused self_attn.qkv with q_bias/v_bias
  kSiglip,  // HF SiglipVisionModel: CLIP's names, no class token, gelu_pytorch_tanh
  kDinov2,  // HF Dinov2Model: ViT's attention names, norm1/norm2, mlp.*, layer_scale1/2
  kTimm,    // timm VisionTransformer: blocks.N.{norm1, attn.qkv (fused, with bias), attn.proj, ls1, norm2, mlp.fc1, mlp.fc2, ls2}
};

struct VisionSpec {
  VisionStyle style = VisionStyle::kVit;
  std::string prefix;  // "vit", "vision_model", "vision_tower.vision_model"; timm: "" 
  int64_t hidden = 0;
  int64_t layers = 0;         // layers the checkpoint has
  int64_t layers_to_run = 0;  // layers whose output is used (LLaVA: layers - 1)
  int64_t heads = 0;
  int64_t mlp = 0;
  int64_t patch = 0;
  int64_t positions = 0;  // patches + 1 class token
  SizeExpr rows;          // token rows: tokens() (S = positions) or fixed_tokens(positions)
  SizeExpr patch_rows;    // rows of patches (tokens() for ViT: one token over, see docs)
  SizeExpr scores_per_head;
  double dropout = 0.0;            // hidden dropout
  double attention_dropout = 0.0;
  bool post_layernorm = false;     // a final LayerNorm after the layers
  // DINOv2: a learned per-channel scale on each residual branch
  // (Dinov2LayerScale: hidden * lambda1), and the SwiGLU FFN (Dinov2SwiGLUFFN:
  // weights_in to 2 x mlp, chunked, silu(x1) * x2, weights_out) instead of fc1/fc2.
  bool layer_scale = false;
  bool swiglu = false;
  // pixel_values arrive in fp32 whatever the run's precision: transformers' image
  // processors return float32 (ViTImageProcessor, CLIPImageProcessor: rescale and
  // normalize in numpy float32), which the Trainer's collator hands on as they are;
  // under autocast the patch conv runs on (and keeps) its own 16-bit copy.
  bool fp32_pixels = false;
};

// Adds a non-checkpointable "vision_embeddings" block (pixel_values input, patch
// conv, class token, positions, CLIP's pre-layernorm) and one checkpointable
// block per layer that runs. Layers beyond layers_to_run (LLaVA's last CLIP
// layer, whose output HF computes and drops) become one node in the last block
// that holds their parameters and forward FLOPs and saves nothing. Returns the
// hidden state of the last layer that runs.
std::string add_vision_encoder(GraphBuilder& b, const VisionSpec& spec, const ZooOptions& options);

// Adds the post LayerNorm "<prefix>.post_layernorm" (or "<prefix>.layernorm"
// for kVit) in the current block.
std::string add_vision_post_norm(GraphBuilder& b, const VisionSpec& spec, const std::string& hidden);

// One encoder layer "<prefix>.encoder.layer(s).<i>" of `spec` in a new
// checkpointable block; also CLIP's and SigLIP's text encoder layers, which
// have the vision layers' names and shapes.
std::string add_vision_layer(GraphBuilder& b, const VisionSpec& spec, int64_t i, const std::string& hidden,
                             const ZooOptions& options);

// openai/clip-vit-large-patch14-336 vision_config: hidden_size 1024,
// intermediate_size 4096, num_hidden_layers 24, num_attention_heads 16,
// patch_size 14, image_size 336 (577 tokens), hidden_act quick_gelu.
VisionSpec clip_vit_l14_336(const std::string& prefix, SizeExpr rows, SizeExpr patch_rows,
                            SizeExpr scores_per_head);

}  // namespace headroom::models
