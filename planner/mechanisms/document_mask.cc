#include "planner/mechanisms/document_mask.h"

#include <algorithm>
#include <cmath>

#include "graph/op_traits.h"

namespace headroom::planner {
namespace {

constexpr double kTile = 128.0;

// The B*S^2 term of a self-attention FLOP count becomes a B*S term at the
// run's fixed S: S * work per token instead of S^2.
void scale_scores(graph::SizeExpr& flops, double work, int64_t seq) {
  if (flops.bss == 0) return;
  flops.bs += static_cast<int64_t>(std::llround(static_cast<double>(flops.bss) * static_cast<double>(seq) * work));
  flops.bss = 0;
}

}  // namespace

double document_mask_work(int64_t document_tokens, int64_t seq) {
  if (document_tokens >= seq) return 1.0;
  const double row_tiles = static_cast<double>(seq) / kTile;
  const double causal_row = row_tiles * (row_tiles + 1) / 2;
  const double document_tiles = 1 + static_cast<double>(document_tokens - 1) / kTile;
  const double documents = static_cast<double>(seq) / static_cast<double>(document_tokens);
  return std::min(1.0, documents * document_tiles * (document_tiles + 1) / 2 / causal_row);
}

void apply_document_mask(graph::LayerGraph& graph, int64_t document_tokens, int64_t seq) {
  const double work = document_mask_work(document_tokens, seq);
  if (work >= 1.0) return;
  for (graph::Node& node : graph.nodes) {
    if (node.op != graph::op::kFlexAttention) continue;
    scale_scores(node.fwd_flops, work, seq);
    scale_scores(node.bwd_input_flops, work, seq);
  }
}

}  // namespace headroom::planner
