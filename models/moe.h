// The sparse mixture-of-experts MLP of transformers 5.x decoders (Mixtral,
// Qwen2-MoE, Qwen3-MoE, OLMoE) as a LayerGraph: a top-k router and fused 3-D
// expert weights run by transformers' default grouped_mm path
// (integrations/moe.py grouped_mm_experts_forward, 5.23.0). docs/models.md,
// "Mixture of experts", gives each saved tensor its source line.
#pragma once

#include <cstdint>
#include <string>

#include "models/graph_builder.h"

namespace headroom::models {

// One decoder's MoE settings; experts == 0 means a dense MLP everywhere.
struct MoeSpec {
  int64_t experts = 0;              // num_local_experts (Mixtral), num_experts
  int64_t top_k = 0;                // num_experts_per_tok
  int64_t expert_intermediate = 0;  // each expert's width (moe_intermediate_size)
  int64_t shared_intermediate = 0;  // qwen2_moe's shared_expert (0: none)
  int64_t sparse_step = 1;          // decoder_sparse_step: layer i is sparse when (i + 1) % step == 0
  bool norm_topk = false;           // norm_topk_prob (Mixtral always renormalizes)
  bool f32_routing_weights = false; // Mixtral keeps its top-k weights in float32 (no cast back)
  bool mixtral_names = false;       // Mixtral's module names before 5.0: block_sparse_moe, experts.J.w1/w3/w2
  // transformers before 5.0: each expert its own nn.Linear modules in an experts
  // ModuleList, run by a Python loop over the experts (models/moe_loop.h). Set by
  // build_llama from ZooOptions::expert_modules, never by a config reader.
  bool expert_modules = false;
};

// The MoE block's module name under a decoder layer: "mlp", or Mixtral's
// "block_sparse_moe" in the transformers 4.x layout (MixtralDecoderLayer, 4.44.2).
inline std::string moe_module_name(const MoeSpec& moe) {
  return moe.expert_modules && moe.mixtral_names ? "block_sparse_moe" : "mlp";
}

inline bool is_sparse_layer(const MoeSpec& moe, int64_t layer) {
  return moe.experts > 0 && (layer + 1) % moe.sparse_step == 0;
}

// Adds the MoE block "<prefix>" (e.g. "model.layers.3.mlp") over the normalized
// hidden state `x` [tokens, hidden]; returns its output [tokens, hidden].
// Routing is data-dependent, but the grouped path's tensors hold tokens * top_k
// rows however the tokens are routed: the graph has no routing assumption.
std::string add_moe_block(GraphBuilder& b, const MoeSpec& moe, int64_t hidden, const std::string& prefix,
                          const std::string& x);

// Parameters of the experts that do not run for a token ((E - k) / E of the
// expert weights, in either layout): total minus this is the "active" count
// model cards publish.
int64_t inactive_expert_parameters(const graph::LayerGraph& graph, const MoeSpec& moe);

}  // namespace headroom::models
