// Gemma 2 and Gemma 3 text decoders (transformers 5.23.0 modeling_gemma2.py,
// modeling_gemma3.py) as LayerGraphs, and their config.json reader.
// What sets them apart from models/llama.h's decoders: four GemmaRMSNorms a layer
// (post-attention and pre/post feed-forward), attention logits scaled by
// query_pre_attn_scalar^-0.5 and, in Gemma 2, soft-capped (tanh) before the
// softmax, sliding-window layers between global ones, Gemma 3's q/k norms and
// its two RoPE tables, and the final logits soft-capped (one more kept tensor
// of the vocabulary's size). docs/models.md, "Gemma 2 and Gemma 3".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/layer_graph.h"
#include "graph/status.h"
#include "models/llama.h"
#include "models/zoo.h"

namespace headroom::models {

struct HfFields;

struct GemmaConfig {
  // Sizes, head_dim, GeGLU, sqrt(hidden) embedding scale, tied embeddings,
  // GemmaRMSNorm; qk_norm set for Gemma 3.
  LlamaConfig base;
  std::vector<bool> sliding;     // per layer: "sliding_attention" (else "full_attention")
  int64_t sliding_window = 0;    // tokens a sliding layer sees
  double query_pre_attn_scalar = 256;
  std::optional<double> attn_softcap;   // attn_logit_softcapping (null: none)
  std::optional<double> final_softcap;  // final_logit_softcapping (null: none)
  bool local_rope = false;  // Gemma 3: sliding layers take their own cos/sin (rope_local_base_freq)
};

// google/gemma-2-9b config.json: hidden_size 3584, intermediate_size 14336, 42 layers,
// 16 heads, 8 K/V heads, head_dim 256, vocab_size 256000, sliding_window 4096 on every
// other layer, soft-capping 50 (attention) and 30 (logits). 9,241,705,984 parameters.
GemmaConfig gemma2_9b_config();
// google/gemma-3-12b text_config (Gemma3TextConfig defaults elsewhere): hidden_size
// 3840, intermediate_size 15360, 48 layers, 16 heads, 8 K/V heads, head_dim 256,
// vocab_size 262208, sliding_window 1024 on five of every six layers, no soft-capping.
GemmaConfig gemma3_12b_text_config();

graph::LayerGraph build_gemma(const GemmaConfig& config, const ZooOptions& options);

// model_type gemma2 and gemma3_text (Gemma2ForCausalLM, Gemma3ForCausalLM), and
// gemma3 (Gemma3ForConditionalGeneration): its text_config is read, and the
// config is refused by name while its SigLIP vision tower is not built.
Result<GemmaConfig> read_gemma_config(const HfFields& c, const std::string& type);
Result<graph::LayerGraph> hf_gemma_family(const HfFields& c, const std::string& type,
                                          const ZooOptions& options);

}  // namespace headroom::models
