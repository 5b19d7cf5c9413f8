// The built-in model zoo: architecture configs turned into LayerGraphs whose
// saved-for-backward tensors follow PyTorch autograd (docs/models.md). Every
// graph passes graph::validate_graph. Parameters are built trainable; the
// planner applies freezing and LoRA afterwards.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/layer_graph.h"
#include "graph/status.h"

namespace headroom::models {

enum class AttentionImpl {
  kEager,  // matmul + softmax + matmul: keeps the [B, heads, S, S] probabilities
  kSdpa,   // fused SDPA / flash attention: keeps q, k, v, out and the logsumexp
  // torch.nn.attention.flex_attention (torchtune with packed samples, torchtitan
  // flex): a generated flash-style kernel; keeps what SDPA keeps plus the f32
  // row maxima, and runs slower than FlashAttention-2 (docs/stacks.md).
  kFlex,
  // flash-attn's Triton kernel (flash_attn_triton.py: llm-foundry's attn_impl triton,
  // MPT's remote code): keeps what SDPA keeps, runs slower than FlashAttention-2.
  kTritonFlash,
};

// Whose rotary-embedding modules the model runs, for the cos/sin caches they keep
// on the device as buffers (models/rope_caches.h; docs/models.md, "Rotary caches").
enum class RopeModules {
  kPerForward,          // cos/sin computed each forward, nothing cached: transformers >= 4.45, the zoo
  kTransformersCached,  // transformers < 4.45: Qwen2's and GPT-NeoX's layers each cache cos and sin
  kTorchtune,           // torchtune's builders: one fp32 cache the layers share
  kTorchtuneLora,       // torchtune's lora_ builders: an fp32 cache per layer (shared in Llama 3.1/3.2's)
};

struct ZooOptions {
  AttentionImpl attention = AttentionImpl::kSdpa;
  // Fused attention over grouped K/V runs on K and V copied to every head, as
  // transformers before 4.54 (repeat_kv) and torchtune do; otherwise it takes the
  // grouped K and V. Eager attention always copies.
  bool sdpa_repeat_kv = false;
  // Set from the stack and its transformers release (planner/settings/stack.cc).
  RopeModules rope_modules = RopeModules::kPerForward;
  // torchtune from 0.5: its RMSNorm runs F.rms_norm over x.float() with the 16-bit
  // scale, whose dtype mismatch takes torch's composite path: the normalized tensor
  // the scale multiplies is fp32 (RmsNormStyle::kTransformersF32). Set from the stack
  // and its torchtune release (planner/predict/model_context.cc).
  bool rms_norm_f32_normalized = false;
  std::optional<double> dropout;  // overrides every dropout p; nullopt = model default
  bool precomputed_text_embeddings = true;  // flux: T5/CLIP outputs given as inputs
  // flux: T5 tokens per sample (diffusers' max_sequence_length); nullopt: the
  // model's default (512 for FLUX.1-dev and Kontext).
  std::optional<int64_t> text_tokens;
  // Mixture-of-experts decoders as transformers before 5.0 lays them out: each
  // expert its own nn.Linear modules, run by a Python loop (models/moe_loop.h).
  // Set from the run's transformers release (planner/predict/model_context.cc).
  bool expert_modules = false;
  // qwen2_5_vl: the image's side in pixels (--resolution), resized as its processor
  // does; nullopt: the model's default (models/qwen2_5_vl.h).
  std::optional<int64_t> image_side;
  // t5: decoder (target) tokens per sample (--target-seq); nullopt: the model's
  // default (models/t5.h kT5DefaultTargetTokens).
  std::optional<int64_t> target_tokens;
  // t5: lm_head tied only when config.json says so, as transformers before 5.0
  // reads it; from 5.0 T5Config ties it always (models/t5.h). Set from the run's
  // transformers release (planner/predict/model_context.cc).
  bool t5_tie_as_configured = false;
  // Every field counts: the planner keeps built graphs by their options
  // (planner/predict/loaded_models.h).
  bool operator==(const ZooOptions&) const = default;
};

struct ZooEntry {
  std::string name;
  std::string description;
  std::function<graph::LayerGraph(const ZooOptions&)> build;
};

// All zoo models, in a fixed order.
const std::vector<ZooEntry>& zoo_models();

// Builds the named model; an unknown name is an error listing the known names.
Result<graph::LayerGraph> build_zoo_model(std::string_view name, const ZooOptions& options);

}  // namespace headroom::models
