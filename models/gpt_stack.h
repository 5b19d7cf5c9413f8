// A Megatron-style GPT (Korthikanti et al. 2022, Fig. 2): per layer LayerNorm,
// fused QKV linear, attention with the softmax in the compute dtype and
// attention dropout, output projection, dropout, LayerNorm, MLP h->4h GELU
// 4h->h, dropout; learned token embeddings, final LayerNorm, LM head and loss.
// Used by tests to check activation memory against the paper's
// s*b*h*(34 + 5*a*s/h) bytes per layer (eq. 1).
#pragma once

#include <cstdint>

#include "graph/layer_graph.h"
#include "models/zoo.h"

namespace headroom::models {

// Blocks: "embeddings", "layers.0" .. "layers.<layers-1>", "head".
graph::LayerGraph build_gpt_layer_stack(int layers, int64_t hidden, int64_t heads, int64_t vocab,
                                        AttentionImpl attention, double dropout);

}  // namespace headroom::models
