#include "models/layers.h"

namespace headroom::models {

double dropout_p(const ZooOptions& options, double model_default) {
  return options.dropout.value_or(model_default);
}

std::string apply_rope(GraphBuilder& b, const std::string& prefix, const std::string& x,
                       const std::string& cos, const std::string& sin, SizeExpr elements) {
  const std::string x_cos = b.mul_const(prefix + ".cos", x, cos, elements);
  const std::string rotated = b.copy(prefix + ".rotate_half", "rotate_half", {x}, elements);
  const std::string x_sin = b.mul_const(prefix + ".sin", rotated, sin, elements);
  return b.add(prefix + ".rope", x_cos, x_sin, elements);
}

std::string attention(GraphBuilder& b, AttentionImpl impl, const std::string& prefix,
                      const std::string& q, const std::string& k, const std::string& v,
                      const AttentionShape& shape, const EagerAttentionOptions& eager) {
  if (impl == AttentionImpl::kSdpa) return b.sdpa_attention(prefix, q, k, v, shape);
  if (impl == AttentionImpl::kFlex) return b.flex_attention(prefix, q, k, v, shape);
  if (impl == AttentionImpl::kTritonFlash) return b.triton_flash_attention(prefix, q, k, v, shape);
  return b.eager_attention(prefix, q, k, v, shape, eager);
}

void add_classifier_loss(GraphBuilder& b, const std::string& name, const std::string& labels,
                         const std::string& features, int64_t width, int64_t classes) {
  const std::string logits = b.linear(name, features, SizeExpr::per_sample(1), width, classes, true);
  OpSpec loss{"loss", "loss", {logits, labels}, SizeExpr::constant(1), DType::kF32,
              {SavedRef{logits, SaveWhen::kAnyGrad}}, {}, SizeExpr::per_sample(5 * classes),
              SizeExpr::per_sample(2 * classes), {}, {}};
  b.op(loss);
}

AttentionShape self_attention_shape(int64_t heads, int64_t kv_heads, int64_t head_dim,
                                    SizeExpr rows, SizeExpr scores_per_head, bool causal) {
  AttentionShape shape;
  shape.heads = heads;
  shape.kv_heads = kv_heads;
  shape.head_dim = head_dim;
  shape.query_rows = rows;
  shape.key_rows = rows;
  shape.scores_per_head = scores_per_head;
  shape.causal = causal;
  return shape;
}

void tie_parameter(graph::LayerGraph& graph, const std::string& name, const std::string& to) {
  for (graph::Node& node : graph.nodes) {
    for (graph::Param& param : node.params) {
      if (param.name == name) param.tied_to = to;
    }
  }
}

}  // namespace headroom::models
