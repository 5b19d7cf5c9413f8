// fp8 training with torchao's Float8Linear, dynamic tensorwise scaling, as
// torchtitan converts a model's linears (convert_to_float8_training). Each
// converted linear casts its input and its weight to float8_e4m3 with one
// scale per tensor (amax = max(abs(x)), torchao/float8/float8_utils.py), runs
// its forward GEMM and both backward GEMMs (dX and dW, with the output
// gradient cast to fp8 in backward) as torch._scaled_mm on the fp8 tensor
// cores, and returns a 16-bit output. docs/stacks.md, "Float8 training".
#pragma once

#include <optional>
#include <string_view>

#include "graph/dtype.h"
#include "graph/layer_graph.h"
#include "planner/settings/weight_formats.h"

namespace headroom::planner {

struct Float8Options {
  Float8Recipe recipe = Float8Recipe::kNone;
  // Float8LinearConfig.enable_fsdp_float8_all_gather: FSDP2 casts each weight
  // shard to fp8 before the all-gather, so the unsharded weight is already fp8
  // and no fp8 copy of it is made (or saved) in forward.
  bool all_gather = false;
};

// Rewrites `graph` for fp8 training: every linear of a checkpointable block
// (the layers; the output head stays 16-bit, as torchtitan's
// filter_fqns = ["output"]) whose dimensions are multiples of 16 (the fp8 GEMM's
// requirement; torchtitan module_filter_fn) reads "<node>.input_fp8", a cast
// node's 1-byte copy of its input, and, without the fp8 all-gather,
// "<node>.weight_fp8", a 1-byte copy of its weight that it keeps for dX. Its
// backward holds the fp8 copy of its output gradient (e5m2) as workspace.
// Sizes in `compute` (the run's compute dtype) units where the graph wants them.
void apply_float8_linears(graph::LayerGraph& graph, const Float8Options& options, graph::DType compute);

// Whether `node` is a converted linear (it reads its "<node>.input_fp8").
bool is_float8_linear(const graph::Node& node);

// Bytes the casts of a converted linear's backward move beyond its GEMMs: the
// output gradient read twice (amax, then the cast) and written as fp8, and,
// when the linear saved its 16-bit input (kTensorwise), that input cast again
// the same way for dW.
double float8_backward_cast_bytes(const graph::Node& node, graph::DType compute, int64_t batch, int64_t seq);

}  // namespace headroom::planner
