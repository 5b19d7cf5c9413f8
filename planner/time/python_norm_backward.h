// The backward of an RMSNorm written in Python ops (transformers' LlamaRMSNorm
// and GemmaRMSNorm, torchtune's RMSNorm; models/graph_builder.h python_rms_norm).
// Autograd runs each op's own formula, and the input-gradient chain peaks inside
// PowBackward0: the multiply's gradient for x32 waits to be summed with the pow
// path's, while mean's backward has materialised its float32 [rows, width]
// (`grad.expand(..) / n`) and pow_backward computes `grad * (2 * x32.pow(1))` with
// both temporaries alive: five float32 tensors of x's size at once (torch 2.11,
// tools/autograd/derivatives.yaml pow.Tensor_Scalar and mean.dim, and
// FunctionsManual.cpp pow_backward/mean_backward). The output's gradient has been
// consumed by then and the input's is not made yet. Measured on the meta device by
// the oracle: mul x3, div and pow, float32 (docs/memory-model.md, "Per-block terms").
#pragma once

#include <cstdint>

#include "graph/graph_analysis.h"
#include "graph/layer_graph.h"
#include "planner/memory/state_bytes.h"

namespace headroom::planner {

// Float32 tensors of x's size alive at the peak of the chain.
inline constexpr int64_t kPythonNormBackwardF32Tensors = 5;

// Bytes of that peak for node `n`, or 0 when `n` is not such a norm or does not
// run the chain as eager ops: its input needs no gradient, or it no longer keeps
// x32 for backward (a compiled block's partitioner saves something else and its
// backward is fused).
int64_t python_norm_backward_bytes(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis, int n,
                                   int64_t batch, int64_t seq, Accounting accounting);

}  // namespace headroom::planner
