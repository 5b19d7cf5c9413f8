// What a bitsandbytes release's 4-bit linear holds beyond the current one's
// (docs/stacks.md, "bitsandbytes releases"; settings/bnb_release.h decides which).
// Runs after the autocast rewrites, which put a 16-bit cast "<node>.cast:<x>" in
// front of a 4-bit linear fed fp32 (mechanisms/autocast.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "graph/graph_analysis.h"
#include "graph/layer_graph.h"
#include "planner/mechanisms/bnb_gemm_dispatch.h"

namespace headroom::planner {

struct BnbMatmul4bit {
  // MatMul4Bit keeps its input A for backward (bitsandbytes up to 0.43.1).
  bool keeps_input = false;
  // A Linear4bit fed fp32 computes in fp32 (up to 0.46): A is the fp32 input itself,
  // and the dequantized weight is copied to fp32 before autocast casts it back.
  bool fp32_compute = false;
  // The model's weights are 16-bit, so dequantize_4bit returns 16 bits
  // (QuantState.dtype is the loaded weight's); over an fp32 model it returns fp32
  // whatever the release, and the copy to fp32 is no copy.
  bool sixteen_bit_weights = true;
  // From 0.50.0 MatMul4Bit.forward runs bitsandbytes::gemm_4bit: where it falls back to the
  // dequantized weight, a double-quantized weight's absmax is dequantized to fp32 and the
  // offset added into a second fp32 copy, both live until F.linear returns.
  bool gemm_4bit_op = false;
  // The dtype of A (the compute dtype) and of the node's workspace elements.
  graph::DType compute_dtype = graph::DType::kBF16;
  // gemm_4bit's choice between the fused kernel and the fallback (bnb_gemm_dispatch.h): the
  // run's GPU and the batch and sequence M is taken at. nullopt: every forward falls back
  // (an older release, or a GPU whose compute capability and SM count are not known).
  struct GemmDispatch {
    GemmArch arch;
    int64_t micro_batch = 1;
    int64_t seq = 1;
  };
  std::optional<GemmDispatch> gemm_dispatch;
};

void apply_bnb_matmul4bit(graph::LayerGraph& graph, const BnbMatmul4bit& bnb);

// What a checkpointed block keeps besides its inputs (ModelContext::checkpoint_saves):
// with keeps_input, each 4-bit linear's kept input. MatMul4Bit holds it on its autograd
// context (ctx.tensors), not through save_for_backward, so non-reentrant checkpointing's
// saved-tensor hooks never see it: every layer's stays from its forward to its backward.
// (Reentrant checkpointing runs the forward under no_grad and keeps none; headroom prices
// the non-reentrant default.)
void hold_bnb_inputs(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis, const BnbMatmul4bit& bnb,
                     std::vector<std::vector<int>>& checkpoint_saves);

}  // namespace headroom::planner
