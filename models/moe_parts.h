// Pieces of models/moe.cc that other MoE builders reuse (DeepSeek's MoE block,
// models/deepseek_moe.cc): the routed experts on transformers' grouped_mm path
// after a family's own router. Internal to models/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/graph_builder.h"
#include "models/moe.h"

namespace headroom::models {

// What a router hands the experts.
struct Routing {
  std::string weights;  // [T, k] top-k weights (bf16, or f32 when MoeSpec::f32_routing_weights)
  std::string indices;  // [T, k] int64 expert ids
};

// The router over `x` [T, hidden]: logits, float32 softmax, top-k, optional
// renormalization, cast back unless m.f32_routing_weights. `linear_gate`: the
// gate is an nn.Linear (transformers 4.x: LoRA and bitsandbytes see it) rather
// than 5.x's TopKRouter parameter (op router_linear). Nodes "<prefix>.gate*".
Routing add_router(GraphBuilder& b, const MoeSpec& m, int64_t hidden, const std::string& prefix,
                   const std::string& x, bool linear_gate);

// Qwen2-MoE's shared expert: nodes "<prefix>.shared_expert.*" and
// "<prefix>.shared_expert_gate"; returns sigmoid(gate) * shared_expert(x).
std::string add_shared_expert(GraphBuilder& b, const MoeSpec& m, int64_t hidden, const std::string& prefix,
                              const std::string& x);

// A node of no GraphBuilder primitive: `saves` may name its inputs or `name`.
OpSpec moe_node(const std::string& name, const char* op, std::vector<std::string> inputs, SizeExpr out,
                std::optional<DType> dtype, std::vector<SavedRef> saves);

// grouped_mm_experts_forward over `x` [T, hidden] (integrations/moe.py,
// transformers 5.23.0): nodes "<prefix>.experts.*"; returns [T, hidden] in the
// hidden dtype. Uses m.experts, m.top_k, m.expert_intermediate, m.f32_routing_weights.
std::string add_routed_experts(GraphBuilder& b, const MoeSpec& m, int64_t hidden, const std::string& prefix,
                               const std::string& x, const Routing& routing);

}  // namespace headroom::models
