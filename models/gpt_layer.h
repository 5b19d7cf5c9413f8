// The GPT-2 transformer layer (HF GPT2Block), shared by the GPT-2 zoo entry and
// the Megatron-style test stack: LayerNorm, fused QKV, attention, projection,
// dropout, LayerNorm, MLP h->4h GELU 4h->h, dropout, with HF GPT-2 module names.
#pragma once

#include <cstdint>
#include <string>

#include "models/graph_builder.h"
#include "models/zoo.h"

namespace headroom::models {

struct GptLayerSpec {
  std::string prefix;  // module path of the layer, e.g. "transformer.h.3"
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t inner = 0;   // MLP width; 0: 4 * hidden (GPT-2's n_inner default)
  bool conv1d = true;  // GPT-2 Conv1D weights ([in, out]) rather than nn.Linear
  // HF "gelu_new" (NewGELUActivation) is composed of Python tensor ops and keeps
  // four [B, S, 4h] tensors; false: one fused GELU kernel that keeps its input.
  bool unfused_gelu_new = true;
  double attention_dropout = 0.0;
  double residual_dropout = 0.0;
  AttentionImpl attention = AttentionImpl::kSdpa;
};

// Adds one checkpointable block named spec.prefix; returns the layer output.
std::string add_gpt_layer(GraphBuilder& b, const GptLayerSpec& spec, const std::string& hidden);

}  // namespace headroom::models
