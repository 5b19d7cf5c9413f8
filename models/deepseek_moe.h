// DeepSeek's MLP blocks (transformers 5.23.0 DeepseekV2Moe / DeepseekV3MoE and
// DeepseekV2MLP / DeepseekV3MLP). Internal to models/ (models/deepseek.cc).
#pragma once

#include <cstdint>
#include <string>

#include "models/deepseek.h"
#include "models/graph_builder.h"
#include "models/moe_parts.h"

namespace headroom::models {

// A SwiGLU MLP "<prefix>.{gate,up,down}_proj" of `width` over x [T, hidden].
std::string add_deepseek_mlp(GraphBuilder& b, const std::string& prefix, const std::string& x, int64_t hidden,
                             int64_t width);

// The MoE block "<prefix>" (e.g. "model.layers.3.mlp"): router "<prefix>.gate",
// routed experts "<prefix>.experts" (grouped_mm), "<prefix>.shared_experts".
// `expert_modules`: transformers 4.x's layout, each expert "<prefix>.experts.<j>"
// its own nn.Linear modules run by a Python loop (V2: over the tokens sorted by
// expert, models/deepseek_moe_loop.cc; V3: models/moe_loop.h's loop).
std::string add_deepseek_moe(GraphBuilder& b, const DeepseekConfig& c, const std::string& prefix,
                             const std::string& x, bool expert_modules);

// DeepseekV2MoE.moe, transformers 4.57.6, after the router: returns [T, hidden].
std::string add_deepseek_v2_expert_loop(GraphBuilder& b, const DeepseekConfig& c, const std::string& prefix,
                                        const std::string& x, const Routing& routing);

}  // namespace headroom::models
