// Building blocks shared by the zoo's model files: rotary embeddings as HF
// applies them, attention dispatch on AttentionImpl, and option helpers.
#pragma once

#include <string>

#include "models/graph_builder.h"
#include "models/zoo.h"

namespace headroom::models {

// The dropout p to use: the override in `options` when set, else the model's.
double dropout_p(const ZooOptions& options, double model_default);

// HF apply_rotary_pos_emb: x*cos + rotate_half(x)*sin. cos/sin never require
// grad, so only they are kept (and they are persistent, shared by all layers).
// Nodes "<prefix>.cos", ".rotate_half", ".sin", ".rope"; returns the last.
std::string apply_rope(GraphBuilder& b, const std::string& prefix, const std::string& x,
                       const std::string& cos, const std::string& sin, SizeExpr elements);

// Eager or SDPA attention per `impl`. `eager` applies to the eager path only;
// SDPA/flash keep no dropout mask.
std::string attention(GraphBuilder& b, AttentionImpl impl, const std::string& prefix,
                      const std::string& q, const std::string& k, const std::string& v,
                      const AttentionShape& shape, const EagerAttentionOptions& eager);

// Self-attention shape over rows = B*S tokens (or B*n for a fixed n via
// per_sample), scores B*S^2 (or B*n^2).
AttentionShape self_attention_shape(int64_t heads, int64_t kv_heads, int64_t head_dim,
                                    SizeExpr rows, SizeExpr scores_per_head, bool causal);

// The classifier `name` (a linear with bias) over per-sample `features`
// [B, width], then node "loss": cross entropy on the [B, classes] logits
// against int64 `labels`, keeping the logits (small: per sample).
void add_classifier_loss(GraphBuilder& b, const std::string& name, const std::string& labels,
                         const std::string& features, int64_t width, int64_t classes);

// Ties parameter `name` to `to` (Param::tied_to): tie_word_embeddings' lm_head
// shares the input embedding's weight, so it is stored and trained once.
void tie_parameter(graph::LayerGraph& graph, const std::string& name, const std::string& to);

// Token-count expressions: B*S, and B*n for a fixed count n per sample.
inline SizeExpr tokens() { return SizeExpr::per_token(1); }
inline SizeExpr fixed_tokens(int64_t n) { return SizeExpr::per_sample(n); }
// B*S^2, and B*n^2.
inline SizeExpr square_tokens() { return SizeExpr{0, 0, 0, 0, 0, 1}; }
inline SizeExpr fixed_square(int64_t n) { return SizeExpr::per_sample(n * n); }

}  // namespace headroom::models
