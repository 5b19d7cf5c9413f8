// Llama-family decoders (Llama 3, Mistral, the original Qwen) as LayerGraphs,
// and the pieces LLaVA reuses for its language model.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "graph/layer_graph.h"
#include "models/graph_builder.h"
#include "models/moe.h"
#include "models/rope_caches.h"
#include "models/zoo.h"

namespace headroom::models {

// How an RMSNorm keeps its tensors (docs/models.md, "Save rules").
enum class RmsNormStyle {
  kFused,              // one kernel (Liger, apex, headroom's executor): keeps x and rstd
  kTransformers,       // transformers' LlamaRMSNorm as Python ops: f32 x, rstd, normalized
  kTransformersF32,    // GemmaRMSNorm: the same with the normalized tensor kept in f32
};

// A HF LlamaForCausalLM-style config (also MistralForCausalLM).
struct LlamaConfig {
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t vocab = 0;
  int64_t max_position = 0;
  double attention_dropout = 0.0;
  int64_t head_dim = 0;         // 0: hidden / heads (Qwen3 and Llama 3.2 may set it)
  bool qkv_bias = false;        // Qwen2: q/k/v projections carry a bias
  bool qk_norm = false;         // Qwen3: RMSNorm over each head of q and k
  bool qk_norm_full_width = false;  // OLMoE: q_norm / k_norm over all heads at once, before the split
  bool tie_embeddings = false;  // lm_head shares embed_tokens' weight
  // Config-file families only (models/hf_import.cc); the zoo keeps the defaults.
  const char* mlp_activation = "silu";  // gemma: "gelu_tanh" (GeGLU)
  bool scale_embeddings = false;        // gemma: embeddings times sqrt(hidden_size)
  bool fused_projections = false;       // phi3: self_attn.qkv_proj, mlp.gate_up_proj
  // The zoo models the fused kernel its executor trains with; graphs read from a
  // config.json model transformers' own norm, which is what a transformers run keeps.
  RmsNormStyle rms_norm = RmsNormStyle::kFused;
  // What the libraries' rotary modules cache for this family (models/rope_caches.h).
  RopeCacheStyle rope_cache = kLlamaRope;
  // Sparse layers' mixture of experts (models/moe.h); experts == 0: dense.
  MoeSpec moe{};
  // Config-file Phi-3 and Mistral: every layer attends to this many tokens (0: all).
  // Only SDPA's mask depends on it (GraphBuilder::sdpa_attention).
  int64_t sliding_window = 0;
};

// meta-llama/Meta-Llama-3-8B config.json: hidden_size 4096, intermediate_size
// 14336, num_hidden_layers 32, num_attention_heads 32, num_key_value_heads 8,
// vocab_size 128256, max_position_embeddings 8192, attention_dropout 0.0.
inline constexpr LlamaConfig kLlama3_8b{4096, 14336, 32, 32, 8, 128256, 8192, 0.0};
// meta-llama/Llama-3.1-8B config.json: as Llama-3-8B, max_position_embeddings 131072.
inline constexpr LlamaConfig kLlama31_8b{4096, 14336, 32, 32, 8, 128256, 131072, 0.0};
// mistralai/Mistral-7B-v0.1 config.json: hidden_size 4096, intermediate_size
// 14336, num_hidden_layers 32, num_attention_heads 32, num_key_value_heads 8,
// vocab_size 32000, max_position_embeddings 32768 (sliding_window 4096).
inline constexpr LlamaConfig kMistral7b{4096, 14336, 32, 32, 8, 32000, 32768, 0.0};
// mistralai/Mixtral-8x7B-v0.1 config.json: hidden_size 4096, intermediate_size
// 14336, 32 layers, 32 heads, 8 KV heads, vocab_size 32000,
// max_position_embeddings 32768, num_local_experts 8, num_experts_per_tok 2;
// transformers' own RMSNorm (the zoo's MoE graphs are what a transformers run keeps).
inline constexpr LlamaConfig kMixtral8x7b{4096, 14336, 32, 32, 8, 32000, 32768, 0.0, 0, false, false, false, false,
                                          "silu", false, false, RmsNormStyle::kTransformers, kMixtralRope,
                                          MoeSpec{8, 2, 14336, 0, 1, true, true, true}};
// Qwen/Qwen3-30B-A3B config.json: hidden_size 2048, 48 layers, 32 heads, 4 KV
// heads, head_dim 128, vocab_size 151936, max_position_embeddings 40960,
// num_experts 128, num_experts_per_tok 8, moe_intermediate_size 768,
// norm_topk_prob true, decoder_sparse_step 1, q/k norms (Qwen3).
inline constexpr LlamaConfig kQwen3_30bA3b{2048, 6144, 48, 32, 4, 151936, 40960, 0.0, 128, false, true, false, false,
                                           "silu", false, false, RmsNormStyle::kTransformers, RopeCacheStyle{},
                                           MoeSpec{128, 8, 768, 0, 1, true, false}};
// "tiny-llama": the Llama 3 architecture (GQA 4:2, SwiGLU, RoPE) small enough to
// train on a CPU in tests; hidden 64, intermediate 176, 4 layers, vocab 256.
inline constexpr LlamaConfig kTinyLlama{64, 176, 4, 4, 2, 256, 256, 0.0};
// "tiny-moe": Mixtral's structure (Llama attention, every layer sparse, top-k
// renormalised, float32 routing weights) small enough to train on a CPU in
// tests: hidden 64, 4 layers, 4/2 heads, vocab 256, 4 experts of width 96,
// top-2; the fused RMSNorm of the executor, as tiny-llama.
inline constexpr LlamaConfig kTinyMoe{64, 96, 4, 4, 2, 256, 256, 0.0, 0, false, false, false, false,
                                      "silu", false, false, RmsNormStyle::kFused, kLlamaRope,
                                      MoeSpec{4, 2, 96, 0, 1, true, true, true}};

// Adds "<prefix>.rotary_emb.cos"/".sin" ([1, S, head_dim], compute dtype, as
// HF LlamaRotaryEmbedding returns them) read from an int64 position_ids input.
std::pair<std::string, std::string> add_rope_tables(GraphBuilder& b, const std::string& prefix,
                                                    int64_t head_dim);

// Adds the decoder layers "<prefix>.layers.<i>", one checkpointable block each;
// returns the last hidden state.
std::string add_llama_layers(GraphBuilder& b, const LlamaConfig& config, const std::string& prefix,
                             std::string hidden, const std::string& cos, const std::string& sin,
                             const ZooOptions& options);

// Adds a non-checkpointable "head" block: "<norm>" RMSNorm, "<lm_head>" and the
// HF causal-LM loss against an int64 "labels" input.
void add_causal_lm_head(GraphBuilder& b, const std::string& norm, const std::string& lm_head,
                        const std::string& hidden, int64_t hidden_size, int64_t vocab,
                        RmsNormStyle norm_style = RmsNormStyle::kFused);

// An RMSNorm with a weight over `width` in the given style.
std::string add_rms_norm(GraphBuilder& b, RmsNormStyle style, const std::string& module,
                         const std::string& x, SizeExpr rows, int64_t width);

graph::LayerGraph build_llama(const LlamaConfig& config, const ZooOptions& options);
// The original Qwen (QWenLMHeadModel, remote code modeling_qwen.py): fused c_attn
// with a bias, MHA, MLP a1 * silu(a2) over w1 and w2 of intermediate_size / 2
// each, c_proj; no other biases (no_bias true).
struct QwenConfig {
  int64_t hidden = 4096;
  int64_t ffn_half = 11008;
  int64_t layers = 32;
  int64_t heads = 32;
  int64_t vocab = 151936;
  double dropout = 0.0;  // attn_dropout_prob = emb_dropout_prob
};
// Qwen/Qwen-7B config.json (QWenConfig): hidden_size 4096, num_hidden_layers
// 32, num_attention_heads 32, kv_channels 128, intermediate_size 22016 (w1 and
// w2 take half each: 11008), vocab_size 151936, seq_length 8192,
// max_position_embeddings 32768, no_bias true (c_attn keeps its bias),
// attn_dropout_prob 0.0, emb_dropout_prob 0.0, tie_word_embeddings false.
inline constexpr QwenConfig kQwen7b{};

graph::LayerGraph build_qwen(const QwenConfig& config, const ZooOptions& options);
graph::LayerGraph build_qwen_7b(const ZooOptions& options);

}  // namespace headroom::models
