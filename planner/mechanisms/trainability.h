// Applies what trains to a model graph: freezing by pattern, LoRA adapters on
// target linears, and QLoRA's 4-bit NF4 base with double quantization. The
// result is a new LayerGraph whose params, saved tensors and FLOPs include the
// adapters, so the rest of the planner needs no special cases for them.
#pragma once

#include "graph/layer_graph.h"
#include "graph/status.h"
#include "planner/mechanisms/name_globs.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// Bytes per NF4-quantized weight element including constants, with double
// quantization: 4 bits + 8/64 + 32/(64*256) bits (Dettmers et al. 2023, QLoRA, Sec. 3).
inline constexpr int64_t kNf4BlockSize = 64;
inline constexpr int64_t kNf4SecondLevelBlockSize = 256;
inline constexpr int64_t kNf4Values = 16;          // the NF4 code book
inline constexpr int64_t kDynamicMapValues = 256;  // bitsandbytes create_dynamic_map, 8 bits

// Errors: a LoRA/QLoRA run whose targets match no linear; a pattern that freezes
// everything in full mode.
Result<graph::LayerGraph> apply_training_mode(const graph::LayerGraph& graph,
                                              const RunSettings& settings);

// QLoRA's NF4 base weight: makes `node`'s frozen weight NF4 with bitsandbytes'
// constants beside it (trainability.cc) and a dequantized copy per matmul.
void quantize_linear(graph::Node& node, bool double_quant);

// A LoRA adapter weight added by apply_training_mode (lora_A / lora_B).
bool is_lora_adapter(const graph::Param& param);
// Whether `param` is a constant of a quantized weight (QLoRA's ".absmax",
// ".quant_map", ".nested_absmax", ".nested_quant_map", ".nested_offset"):
// storage, not a parameter of the model.
bool is_quantization_constant(const graph::Param& param);

}  // namespace headroom::planner
