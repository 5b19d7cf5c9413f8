// Flux's frozen text encoders (CLIP-L text, T5-XXL encoder) as single frozen
// nodes, for runs that encode prompts on the fly instead of precomputing them.
#pragma once

#include <string>
#include <utility>

#include "models/graph_builder.h"

namespace headroom::models {

// Adds a non-checkpointable "text_encoders" block: int64 token inputs, node
// "text_encoder" (CLIP ViT-L/14 text model, pooled [B, 768]) and node
// "text_encoder_2" (T5-XXL encoder, [B, text_tokens, 4096]), with every
// parameter frozen (trainable = false). Returns {pooled, encoder_hidden_states}.
std::pair<std::string, std::string> add_flux_text_encoders(GraphBuilder& b, int64_t text_tokens);

}  // namespace headroom::models
