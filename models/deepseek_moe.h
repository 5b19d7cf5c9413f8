// DeepSeek's MLP blocks (transformers 5.23.0 DeepseekV2Moe / DeepseekV3MoE and
// DeepseekV2MLP / DeepseekV3MLP). Internal to models/ (models/deepseek.cc).
#pragma once

#include <cstdint>
#include <string>

#include "models/deepseek.h"
#include "models/graph_builder.h"

namespace headroom::models {

// A SwiGLU MLP "<prefix>.{gate,up,down}_proj" of `width` over x [T, hidden].
std::string add_deepseek_mlp(GraphBuilder& b, const std::string& prefix, const std::string& x, int64_t hidden,
                             int64_t width);

// The MoE block "<prefix>" (e.g. "model.layers.3.mlp"): router "<prefix>.gate",
// routed experts "<prefix>.experts" (grouped_mm), "<prefix>.shared_experts".
std::string add_deepseek_moe(GraphBuilder& b, const DeepseekConfig& c, const std::string& prefix,
                             const std::string& x);

}  // namespace headroom::models
