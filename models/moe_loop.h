// The sparse MoE block as transformers 4.x runs it (MixtralSparseMoeBlock,
// Qwen2MoeSparseMoeBlock, 4.44.2; Qwen3-MoE and OLMoE copy it until 5.0): an
// nn.Linear gate, then a Python loop over the experts, each its own nn.Linear
// modules in an experts ModuleList, so bitsandbytes quantizes and PEFT wraps
// them like any Linear. docs/models.md, "Mixture of experts before 5.0".
#pragma once

#include <cstdint>
#include <string>

#include "models/graph_builder.h"
#include "models/moe.h"
#include "models/moe_parts.h"

namespace headroom::models {

// Adds the block "<prefix>" (e.g. "model.layers.3.block_sparse_moe") over `x`
// [tokens, hidden]; returns its output [tokens, hidden]. Routing is
// data-dependent: each expert's tensors are sized at the balanced count of
// tokens * top_k / experts routed rows (a SizeExpr share, rounded up).
std::string add_expert_loop_block(GraphBuilder& b, const MoeSpec& moe, int64_t hidden, const std::string& prefix,
                                  const std::string& x);

// The expert loop alone, after a family's own router (DeepseekV3MoE.moe,
// transformers 4.57.6): with m.f32_routing_weights the routing weights stay
// float32, so each expert's weighted output and the block's accumulator
// (`zeros_like(hidden_states, dtype=topk_weights.dtype)`) are float32 and the
// result is cast back to the hidden dtype. Returns [tokens, hidden] in that dtype;
// x stays referenced until the returned node has run.
std::string add_expert_loop(GraphBuilder& b, const MoeSpec& m, int64_t hidden, const std::string& prefix,
                            const std::string& x, const Routing& routing);

// Whether `node` names one of an expert's Linears in this layout
// ("<prefix>.experts.<j>.<name>").
bool is_expert_linear(const std::string& node);

}  // namespace headroom::models
