// RoPE's cos/sin caches: what the libraries' rotary-embedding modules keep on the
// device as buffers (registered persistent=False, so in no checkpoint) beside the
// tables each forward takes from them. They are resident for the whole run, like
// the weights. Which family caches what, with the library files, in docs/models.md,
// "Rotary caches".
#pragma once

#include <cstdint>
#include <string>

#include "graph/layer_graph.h"
#include "models/graph_builder.h"
#include "models/zoo.h"

namespace headroom::models {

// How one family's rotary module caches, library by library.
struct RopeCacheStyle {
  // transformers before 4.45 builds a rotary module in every attention layer,
  // holding cos_cached and sin_cached of [max_position, rotary dims].
  bool transformers_cached = false;
  // Those caches stay fp32 whatever the model's dtype (made from the fp32
  // inv_freq and never cast); otherwise they are made in the model's dtype.
  bool transformers_fp32 = false;
  // torchtune's fp32 cache, values per position and rotary dim: 1 for
  // [max_seq_len, dim / 2, 2], 2 for [max_seq_len, 2 * dim]; 0: torchtune has no
  // builder for the family, and nothing is added.
  int64_t torchtune_values = 0;
  // torchtune's lora_ builder makes a rotary module in every layer, not one shared.
  bool torchtune_lora_per_layer = false;
};

// torchtune's RotaryPositionalEmbeddings in llama2, llama3, mistral and gemma, whose
// lora_ builders make one per layer; transformers computes these per forward.
inline constexpr RopeCacheStyle kLlamaRope{false, false, 1, true};
// torchtune's Llama3ScaledRoPE (llama3_1, llama3_2): the lora_ builders share one.
inline constexpr RopeCacheStyle kLlama3ScaledRope{false, false, 1, false};
// transformers' Qwen2RotaryEmbedding before 4.45; torchtune's Qwen2RotaryPositionalEmbeddings.
inline constexpr RopeCacheStyle kQwen2Rope{true, false, 2, true};
// transformers' MixtralRotaryEmbedding before 4.45 (4.44.2 modeling_mixtral.py: cos_cached
// and sin_cached of [max_position_embeddings, head_dim] in every attention layer, made at
// the default dtype and cast with the model); torchtune has no Mixtral builder.
inline constexpr RopeCacheStyle kMixtralRope{true, false, 0, false};
// torchtune's Phi3RotaryPositionalEmbeddings.
inline constexpr RopeCacheStyle kPhi3Rope{false, false, 2, true};
// transformers' GPTNeoXRotaryEmbedding before 4.45; torchtune has no GPT-NeoX.
inline constexpr RopeCacheStyle kNeoxRope{true, true, 0, false};

// One model's caches: its family's style under the run's rotary modules.
class RopeCaches {
 public:
  RopeCaches(RopeCacheStyle style, RopeModules modules, int64_t max_position, int64_t rotary_dims)
      : style_(style), modules_(modules), max_position_(max_position), rotary_dims_(rotary_dims) {}

  // Whether every attention layer keeps its own.
  bool per_layer() const;

  // Whether the layers share one cache, the model's: torchtune's full builders (and
  // lora_llama3_1, lora_llama3_2) make one rotary module and pass it to every layer.
  bool shared() const;

  // Adds to layer `layer`'s attention node `node` the cache it holds: its own under
  // `layer_module` ("model.layers.3.self_attn.rotary_emb") when per_layer(), or the
  // shared one under `model_module` ("model.rotary_emb") on layer 0, the first to read it.
  void add_for_layer(GraphBuilder& b, int64_t layer, const std::string& node, const std::string& layer_module,
                     const std::string& model_module) const;

  // Adds the buffers of the rotary module `module`
  // ("model.layers.3.self_attn.rotary_emb") to `node`, the node that reads its cos.
  void add(GraphBuilder& b, const std::string& node, const std::string& module) const;

 private:
  RopeCacheStyle style_;
  RopeModules modules_;
  int64_t max_position_;
  int64_t rotary_dims_;
};

// Whether `graph` holds transformers' per-layer caches (before 4.45), which an
// open transformers release then leaves in the band.
// Whether autograd keeps the cache buffer itself for backward: torchtune's
// RotaryPositionalEmbeddings multiplies the fp32 input by views of its fp32 cache
// ([max_seq_len, dim / 2, 2]; modules/position_embeddings.py `forward`, 0.6.1), and
// the mul saves that operand, whose storage is the whole cache. Qwen2's casts its
// slices to the input's dtype first (a copy), transformers' indexes its caches by
// position_ids (a copy): neither keeps the buffer.
bool rope_cache_kept_for_backward(const graph::Param& param);

// Whether `param`, a buffer of a node of `block`, is the cache the layers share (named
// outside the block's module), read by every block of its kind, not by `block` alone.
bool rope_cache_shared(const graph::Param& param, const graph::Block& block);

bool holds_transformers_rope_caches(const graph::LayerGraph& graph);

}  // namespace headroom::models
