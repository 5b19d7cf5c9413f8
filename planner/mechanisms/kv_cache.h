// What transformers' DynamicCache holds a token (transformers/cache_utils.py, 5.23.0:
// DynamicLayer keeps each attention layer's key and value states as the attention
// receives them, [batch, kv heads, tokens, head dim]; repeat_kv copies them per query
// head only inside the attention). GRPO's generation (predict/grpo_phases.h).
#pragma once

#include <cstdint>
#include <vector>

#include "graph/layer_graph.h"
#include "graph/status.h"

namespace headroom::planner {

// Elements a cached token takes in one row, one entry per cached tensor (each layer's
// K, then its V), as the attention reads them before any repeat_kv copy. Refuses a
// graph whose attention is not one fused op (eager attention) or that has none.
Result<std::vector<int64_t>> kv_cache_elements_per_token(const graph::LayerGraph& graph);

}  // namespace headroom::planner
