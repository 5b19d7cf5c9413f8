// Qwen2.5-VL (transformers Qwen2_5_VLForConditionalGeneration, modeling_qwen2_5_vl.py
// 5.23.0): a windowed-attention ViT (Conv3d patches, RMSNorm, qkv with bias, SwiGLU
// MLP with biases, 2-D rotary), the PatchMerger (2x2 patches to one LM token) and a
// Qwen2 decoder whose image placeholders take the merged features (docs/models.md,
// "Qwen2.5-VL"). One image per sample; S counts every LM token, image tokens included.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/layer_graph.h"
#include "models/llama.h"
#include "models/zoo.h"

namespace headroom::models {

// The image as the processor hands it to the model: Qwen2VLImageProcessor resizes
// with smart_resize to multiples of patch x merge (28) within [min_pixels,
// max_pixels] (image_processing_qwen2_vl.py 5.23.0); a still image is one temporal
// patch (the frame repeated temporal_patch_size times), grid_thw = (1, h/14, w/14).
struct Qwen25VlImage {
  int64_t height = 0;  // pixels after smart_resize
  int64_t width = 0;
  int64_t grid_h = 0;  // patches per column and row
  int64_t grid_w = 0;
  int64_t patches() const { return grid_h * grid_w; }
};

struct Qwen25VlVision {
  int64_t hidden = 1280;       // vision_config.hidden_size
  int64_t layers = 32;         // depth
  int64_t heads = 16;          // num_heads
  int64_t mlp = 3420;          // intermediate_size
  int64_t patch = 14;          // patch_size
  int64_t temporal_patch = 2;  // temporal_patch_size
  int64_t merge = 2;           // spatial_merge_size
  int64_t window = 112;        // window_size, in pixels
  int64_t out_hidden = 3584;   // out_hidden_size: the merger's output, the LM's hidden size
  std::vector<int64_t> full_attention_blocks{7, 15, 23, 31};  // fullatt_block_indexes
};

struct Qwen25VlConfig {
  Qwen25VlVision vision;
  LlamaConfig text;  // the Qwen2 decoder (qkv bias, transformers' RMSNorm)
  Qwen25VlImage image;
};

// The processor's defaults for Qwen/Qwen2.5-VL-{3B,7B}-Instruct's
// preprocessor_config.json: min_pixels 3136, max_pixels 12845056.
inline constexpr int64_t kQwen25VlMinPixels = 3136;
inline constexpr int64_t kQwen25VlMaxPixels = 12845056;
// The image side headroom prices when none is given (256 LM image tokens).
inline constexpr int64_t kQwen25VlDefaultSide = 448;

// smart_resize(height, width, factor, min_pixels, max_pixels) of qwen2_vl's image
// processor, and the patch grid of the result.
Qwen25VlImage qwen25vl_image(int64_t height, int64_t width, const Qwen25VlVision& vision,
                             int64_t min_pixels = kQwen25VlMinPixels, int64_t max_pixels = kQwen25VlMaxPixels);

// LM tokens of one image: patches / merge^2.
int64_t qwen25vl_image_tokens(const Qwen25VlConfig& config);

// Sum over the windows of one image of (patches in the window)^2: the attention
// scores per head of a windowed block (get_vision_window_index, vision_utils.py 5.23.0).
int64_t qwen25vl_window_scores(const Qwen25VlVision& vision, const Qwen25VlImage& image);

graph::LayerGraph build_qwen25vl(const Qwen25VlConfig& config, const ZooOptions& options);

// Qwen/Qwen2.5-VL-7B-Instruct config.json, at the image options.image_side (or the default).
Qwen25VlConfig qwen25vl_7b_config(const ZooOptions& options);

// Sequence spec, family and LoRA targets of a built Qwen2.5-VL graph: S counts the
// image tokens, which take `extra_tokens` of it.
void set_qwen25vl_metadata(graph::LayerGraph& graph, const Qwen25VlConfig& config);

}  // namespace headroom::models
