#include "models/graph_builder.h"

#include <cassert>
#include <utility>

namespace headroom::models {
namespace {

// FLOP weights of elementwise ops, per element. Rough: these ops are memory
// bound and the roofline model costs them by fwd_io_elements, not by FLOPs.
constexpr int64_t kNormFwdFlopsPerElement = 5;   // mean, var, sub, mul, scale
constexpr int64_t kNormBwdFlopsPerElement = 8;
constexpr int64_t kActivationFlopsPerElement = 8;  // tanh/exp polynomial
constexpr int64_t kSoftmaxFlopsPerElement = 5;      // max, sub, exp, sum, div

}  // namespace

void GraphBuilder::begin_block(std::string name, std::string kind, bool checkpointable) {
  graph_.blocks.push_back(graph::Block{std::move(name), std::move(kind), checkpointable});
}

void GraphBuilder::add_tensor(const std::string& name, SizeExpr elements,
                              std::optional<DType> dtype, bool requires_grad) {
  [[maybe_unused]] const bool inserted = tensor_index_.emplace(name, graph_.tensors.size()).second;
  assert(inserted && "duplicate tensor name");
  graph_.tensors.push_back(graph::Tensor{name, elements, dtype, requires_grad});
}

SizeExpr GraphBuilder::elements_of(const std::string& tensor) const {
  const auto found = tensor_index_.find(tensor);
  assert(found != tensor_index_.end() && "unknown tensor");
  return found == tensor_index_.end() ? SizeExpr{} : graph_.tensors[found->second].elements;
}

graph::Node& GraphBuilder::add_node(const std::string& name, const std::string& op,
                                    std::vector<std::string> inputs,
                                    std::vector<std::string> outputs) {
  assert(!graph_.blocks.empty() && "begin_block before adding nodes");
  [[maybe_unused]] const bool inserted = node_names_.insert(name).second;
  assert(inserted && "duplicate node name");
  graph::Node node;
  node.name = name;
  node.op = op;
  node.block = static_cast<int>(graph_.blocks.size()) - 1;
  for (const std::string& t : inputs) node.fwd_io_elements += elements_of(t);
  node.inputs = std::move(inputs);
  node.outputs = std::move(outputs);
  graph_.nodes.push_back(std::move(node));
  return graph_.nodes.back();
}

Param GraphBuilder::param(const std::string& name, std::vector<int64_t> shape) const {
  Param p;
  p.name = name;
  p.shape = std::move(shape);
  p.dtype = param_dtype_;
  return p;
}

std::string GraphBuilder::input(const std::string& name, SizeExpr elements,
                                std::optional<DType> dtype, bool requires_grad) {
  add_tensor(name, elements, dtype, requires_grad);
  return name;
}

std::string GraphBuilder::op(const OpSpec& spec) {
  add_tensor(spec.name, spec.out_elements, spec.out_dtype);
  graph::Node& node = add_node(spec.name, spec.op, spec.inputs, {spec.name});
  node.fwd_io_elements += spec.out_elements;
  node.params = spec.params;
  node.saves = spec.saves;
  node.fwd_flops = spec.fwd_flops;
  node.bwd_input_flops = spec.bwd_input_flops;
  node.bwd_param_flops = spec.bwd_param_flops;
  node.workspace_elements = spec.workspace_elements;
  return spec.name;
}

void GraphBuilder::add_params(const std::string& node_name, std::vector<Param> params) {
  for (graph::Node& node : graph_.nodes) {
    if (node.name != node_name) continue;
    for (Param& p : params) node.params.push_back(std::move(p));
    return;
  }
  assert(false && "add_params: unknown node");
}

void GraphBuilder::hold_until(const std::string& node_name, const std::string& tensor) {
  for (graph::Node& node : graph_.nodes) {
    if (node.name != node_name) continue;
    node.holds.push_back(tensor);
    return;
  }
  assert(false && "hold_until: unknown node");
}

std::string GraphBuilder::linear(const std::string& module, const std::string& x, SizeExpr rows,
                                 int64_t in, int64_t out, bool bias, bool conv1d) {
  // Forward 2*rows*in*out; backward dX = dY W and dW = dY^T X cost the same
  // each; the bias gradient is a column sum of dY (rows*out).
  const SizeExpr matmul_flops = rows.scaled(2 * in * out);
  OpSpec spec;
  spec.name = module;
  spec.op = "linear";
  spec.inputs = {x};
  spec.out_elements = times(rows, out);
  spec.saves = {SavedRef{x, SaveWhen::kParamGrad}};
  spec.params.push_back(param(module + ".weight", conv1d ? std::vector<int64_t>{in, out}
                                                         : std::vector<int64_t>{out, in}));
  if (bias) spec.params.push_back(param(module + ".bias", {out}));
  spec.fwd_flops = matmul_flops;
  spec.bwd_input_flops = matmul_flops;
  spec.bwd_param_flops = bias ? matmul_flops + times(rows, out) : matmul_flops;
  const std::string y = op(spec);
  graph_.nodes.back().linear = graph::LinearInfo{in, out, rows};
  return y;
}

std::string GraphBuilder::norm(const std::string& module, const std::string& x, SizeExpr rows,
                               int64_t width, NormKind kind, bool affine, bool bias) {
  const SizeExpr elements = times(rows, width);
  OpSpec spec;
  spec.name = module;
  spec.op = "norm";
  spec.inputs = {x};
  spec.out_elements = elements;
  spec.saves = {SavedRef{x, SaveWhen::kAnyGrad}};
  if (affine) spec.params.push_back(param(module + ".weight", {width}));
  if (affine && bias) spec.params.push_back(param(module + ".bias", {width}));
  spec.fwd_flops = elements.scaled(kNormFwdFlopsPerElement);
  spec.bwd_input_flops = elements.scaled(kNormBwdFlopsPerElement);
  if (affine) spec.bwd_param_flops = elements.scaled(bias ? 3 : 2);
  const std::string y = op(spec);
  // Per-row statistics in float32 (native layer_norm / fused rms_norm kernels).
  std::vector<std::string> stats = {module + ":rstd"};
  if (kind == NormKind::kLayerNorm) stats.push_back(module + ":mean");
  graph::Node& node = graph_.nodes.back();
  for (const std::string& s : stats) {
    node.outputs.push_back(s);
    node.saves.push_back(SavedRef{s, SaveWhen::kAnyGrad});
    node.fwd_io_elements += rows;
  }
  for (const std::string& s : stats) add_tensor(s, rows, DType::kF32);
  return y;
}

std::string GraphBuilder::python_rms_norm(const std::string& module, const std::string& x,
                                          SizeExpr rows, int64_t width, bool normalized_f32) {
  // The fused node (weight, FLOPs, the f32 ":rstd" output), then what the Python
  // ops keep instead of x: the float32 copy of x (kept by pow and by x32 * rstd),
  // rstd (rsqrt keeps its output; the multiply keeps it too) and the normalized
  // tensor the weight multiplies (kept for the weight gradient).
  const std::string y = norm(module, x, rows, width, NormKind::kRmsNorm, true, false);
  const std::string x32 = module + ":x32";
  const std::string rstd = module + ":rstd";
  const std::string normalized = module + ":normalized";
  graph::Node& node = graph_.nodes.back();
  node.outputs.insert(node.outputs.end(), {x32, normalized});
  // Eager traffic of the Python ops, one kernel each. Hugging Face
  // (LlamaRMSNorm): x.float() reads x and writes x32; pow writes x32^2 and mean
  // reads it; the multiply by rstd reads x32 and writes the f32 normalized; the
  // cast back reads it and writes 16 bits; weight * reads that and writes y.
  // GemmaRMSNorm and torchtune's RMSNorm (normalized_f32): the weight
  // multiplies the f32 normalized, and the cast back to x's dtype comes last. With fp32 compute x.float() is a
  // no-op; the one extra copy counted then is a small overestimate.
  const SizeExpr elements = times(rows, width);
  node.fwd_io_elements = elements.scaled(normalized_f32 ? 2 : 4) + rows;
  node.fwd_io_f32_elements = elements.scaled(normalized_f32 ? 9 : 7);
  node.saves = {SavedRef{x32, SaveWhen::kInputGrad}, SavedRef{rstd, SaveWhen::kInputGrad},
                SavedRef{normalized, SaveWhen::kParamGrad}};
  add_tensor(x32, times(rows, width), DType::kF32);
  add_tensor(normalized, times(rows, width),
             normalized_f32 ? std::optional<DType>(DType::kF32) : std::nullopt);
  return y;
}

std::string GraphBuilder::activation(const std::string& name, const std::string& x,
                                     SizeExpr elements, const std::string& kind) {
  OpSpec spec;
  spec.name = name;
  spec.op = "activation:" + kind;
  spec.inputs = {x};
  spec.out_elements = elements;
  // ReLU's backward (threshold_backward) reads its output, not its input: the
  // output is what is kept, and it is often kept anyway by the next linear.
  spec.saves = {SavedRef{kind == "relu" ? name : x, SaveWhen::kInputGrad}};
  spec.fwd_flops = elements.scaled(kActivationFlopsPerElement);
  spec.bwd_input_flops = elements.scaled(kActivationFlopsPerElement);
  return op(spec);
}

std::string GraphBuilder::mul(const std::string& name, const std::string& a, const std::string& b,
                              SizeExpr elements) {
  // d(a*b)/da = b is needed when a requires grad and vice versa (autograd's
  // MulBackward0 saves `other` only if `self` requires grad, and `self` only if
  // `other` does).
  OpSpec spec;
  spec.name = name;
  spec.op = "mul";
  spec.inputs = {a, b};
  spec.out_elements = elements;
  spec.saves = {SavedRef{a, SaveWhen::kOtherInputGrad}, SavedRef{b, SaveWhen::kOtherInputGrad}};
  spec.fwd_flops = elements;
  spec.bwd_input_flops = elements.scaled(2);
  return op(spec);
}

std::string GraphBuilder::mul_const(const std::string& name, const std::string& x,
                                    const std::string& c, SizeExpr elements) {
  OpSpec spec;
  spec.name = name;
  spec.op = "mul";
  spec.inputs = {x, c};
  spec.out_elements = elements;
  spec.saves = {SavedRef{c, SaveWhen::kOtherInputGrad}};  // for dx; nothing for the constant
  spec.fwd_flops = elements;
  spec.bwd_input_flops = elements;
  return op(spec);
}

std::string GraphBuilder::add(const std::string& name, const std::string& a, const std::string& b,
                              SizeExpr elements) {
  OpSpec spec;
  spec.name = name;
  spec.op = "add";
  spec.inputs = {a, b};
  spec.out_elements = elements;
  spec.fwd_flops = elements;
  return op(spec);
}

std::string GraphBuilder::copy(const std::string& name, const std::string& op_name,
                               const std::vector<std::string>& inputs, SizeExpr elements,
                               std::optional<DType> dtype) {
  OpSpec spec;
  spec.name = name;
  spec.op = op_name;
  spec.inputs = inputs;
  spec.out_elements = elements;
  spec.out_dtype = dtype;
  return op(spec);
}

std::vector<std::string> GraphBuilder::split(
    const std::string& name, const std::string& x,
    const std::vector<std::pair<std::string, SizeExpr>>& parts) {
  std::vector<std::string> outputs;
  for (const auto& [part, elements] : parts) {
    add_tensor(part, elements, std::nullopt);
    outputs.push_back(part);
  }
  graph::Node& node = add_node(name, "split", {x}, outputs);
  for (const auto& part : parts) node.fwd_io_elements += part.second;
  return outputs;
}

std::string GraphBuilder::dropout(const std::string& name, const std::string& x,
                                  SizeExpr elements, double p) {
  if (p <= 0.0) return x;
  OpSpec spec;
  spec.name = name;
  spec.op = "dropout";
  spec.inputs = {x};
  spec.out_elements = elements;
  spec.saves = {SavedRef{name + ":mask", SaveWhen::kInputGrad}};
  spec.fwd_flops = elements;
  spec.bwd_input_flops = elements;
  const std::string y = op(spec);
  graph_.nodes.back().outputs.push_back(name + ":mask");
  graph_.nodes.back().fwd_io_elements += elements;
  add_tensor(name + ":mask", elements, DType::kBool);
  return y;
}

std::string GraphBuilder::embedding(const std::string& module, const std::string& ids,
                                    SizeExpr rows, int64_t vocab, int64_t dim) {
  OpSpec spec;
  spec.name = module;
  spec.op = "embedding";
  spec.inputs = {ids};
  spec.out_elements = times(rows, dim);
  spec.saves = {SavedRef{ids, SaveWhen::kParamGrad}};
  spec.params.push_back(param(module + ".weight", {vocab, dim}));
  spec.bwd_param_flops = times(rows, dim);  // scatter-add of the output gradient
  return op(spec);
}

std::string GraphBuilder::eager_attention(const std::string& prefix, const std::string& q,
                                          const std::string& k, const std::string& v,
                                          const AttentionShape& shape,
                                          const EagerAttentionOptions& options) {
  const SizeExpr scores = shape.scores_per_head.scaled(shape.heads);
  // Each matmul: 2*Sq*Sk*head_dim per head forward; backward computes both
  // operand gradients, twice the forward. Full square even when causal: the
  // eager path multiplies the whole matrix and masks afterwards.
  const SizeExpr matmul_flops = scores.scaled(2 * shape.head_dim);
  OpSpec qk;
  qk.name = prefix + ".qk";
  qk.op = "matmul";
  qk.inputs = {q, k};
  qk.out_elements = scores;
  qk.saves = {SavedRef{q, SaveWhen::kInputGrad}, SavedRef{k, SaveWhen::kInputGrad}};
  qk.fwd_flops = matmul_flops;
  qk.bwd_input_flops = matmul_flops.scaled(2);
  const std::string raw = op(qk);
  // Scale and mask: new score tensors, nothing kept (the mask is a constant).
  const std::string masked = copy(prefix + ".scores", "scale_mask", {raw}, scores);
  OpSpec softmax;
  softmax.name = prefix + ".softmax";
  softmax.op = "softmax";
  softmax.inputs = {masked};
  softmax.out_elements = scores;
  if (options.softmax_fp32) softmax.out_dtype = DType::kF32;
  softmax.saves = {SavedRef{softmax.name, SaveWhen::kInputGrad}};  // backward uses y
  softmax.fwd_flops = scores.scaled(kSoftmaxFlopsPerElement);
  softmax.bwd_input_flops = scores.scaled(3);
  std::string probs = op(softmax);
  if (options.softmax_fp32) probs = copy(prefix + ".softmax_cast", "cast", {probs}, scores);
  probs = dropout(prefix + ".dropout", probs, scores, options.dropout);
  OpSpec pv;
  pv.name = prefix + ".pv";
  pv.op = "matmul";
  pv.inputs = {probs, v};
  pv.out_elements = times(shape.query_rows, shape.heads * shape.head_dim);
  pv.saves = {SavedRef{probs, SaveWhen::kInputGrad}, SavedRef{v, SaveWhen::kInputGrad}};
  pv.fwd_flops = matmul_flops;
  pv.bwd_input_flops = matmul_flops.scaled(2);
  return op(pv);
}

std::string GraphBuilder::sdpa_attention(const std::string& prefix, const std::string& q,
                                         const std::string& k, const std::string& v,
                                         const AttentionShape& shape) {
  if (shape.sliding_window <= 0) return fused_attention(prefix + ".sdpa", "attention", q, k, v, shape, {":lse"});
  // transformers 5.23.0 masking_utils.py (sdpa_mask, _ignore_causal_mask_sdpa)
  // builds a bool mask for a sliding layer once kv_length >= sliding_window, and
  // sdpa_attention.py passes it to torch; torch's scaled_dot_product_attention
  // (aten/src/ATen/native/transformers/attention.cpp, convert_boolean_attn_mask)
  // turns it into a new additive mask of the query's dtype on every call, and the
  // memory-efficient kernel, the one that takes a mask, saves it as attn_bias.
  const std::string mask = prefix + ".sdpa_mask";
  add_tensor(mask, shape.scores_per_head, std::nullopt);
  graph_.tensors.back().min_seq = shape.sliding_window;
  // Its write is not timed: fwd_io_elements cannot be gated on S as its size is.
  add_node(mask, "attention_mask", {}, {mask});
  const std::string out = fused_attention(prefix + ".sdpa", "attention", q, k, v, shape, {":lse"});
  graph_.nodes.back().inputs.push_back(mask);
  graph_.nodes.back().saves.push_back(SavedRef{mask, SaveWhen::kInputGrad});
  return out;
}

std::string GraphBuilder::triton_flash_attention(const std::string& prefix, const std::string& q,
                                                 const std::string& k, const std::string& v,
                                                 const AttentionShape& shape) {
  return fused_attention(prefix + ".triton_flash", "triton_flash_attention", q, k, v, shape, {":lse"});
}

std::string GraphBuilder::flex_attention(const std::string& prefix, const std::string& q,
                                         const std::string& k, const std::string& v,
                                         const AttentionShape& shape) {
  return fused_attention(prefix + ".flex", "flex_attention", q, k, v, shape, {":lse", ":max_scores"});
}

std::string GraphBuilder::fused_attention(const std::string& name, const std::string& op_name,
                                          const std::string& q, const std::string& k, const std::string& v,
                                          const AttentionShape& shape, const std::vector<std::string>& row_stats) {
  // Forward: QK^T and PV, 2*2*Sq*Sk*head_dim per head; causal kernels skip the
  // masked half of the tiles, so causal counts half. Backward recomputes P
  // and does four matmuls: 2.5x forward (Dao 2023, FlashAttention-2, Sec. 3).
  SizeExpr fwd = shape.scores_per_head.scaled(4 * shape.heads * shape.head_dim);
  if (shape.causal) fwd = shape.scores_per_head.scaled(2 * shape.heads * shape.head_dim);
  OpSpec spec;
  spec.name = name;
  spec.op = op_name;
  spec.inputs = {q, k, v};
  spec.out_elements = times(shape.query_rows, shape.heads * shape.head_dim);
  spec.saves = {SavedRef{q, SaveWhen::kInputGrad}, SavedRef{k, SaveWhen::kInputGrad},
                SavedRef{v, SaveWhen::kInputGrad}, SavedRef{spec.name, SaveWhen::kInputGrad}};
  for (const std::string& stat : row_stats) spec.saves.push_back(SavedRef{name + stat, SaveWhen::kInputGrad});
  spec.fwd_flops = fwd;
  spec.bwd_input_flops = SizeExpr{fwd.c * 5 / 2, fwd.b * 5 / 2,  fwd.s * 5 / 2,
                                  fwd.bs * 5 / 2, fwd.ss * 5 / 2, fwd.bss * 5 / 2};
  const std::string out = op(spec);
  for (const std::string& stat : row_stats) {
    graph_.nodes.back().outputs.push_back(name + stat);
    add_tensor(name + stat, times(shape.query_rows, shape.heads), DType::kF32);
  }
  return out;
}

std::string GraphBuilder::linear_input_above(const std::string& tensor) const {
  std::string at = tensor;
  for (int index = graph_.producer_of(at); index >= 0; index = graph_.producer_of(at)) {
    const graph::Node& node = graph_.nodes[static_cast<size_t>(index)];
    if (node.inputs.empty()) return {};
    if (node.linear) return node.inputs.front();
    at = node.inputs.front();
  }
  return {};
}

std::string GraphBuilder::lm_loss(const std::string& name, const std::string& logits,
                                  const std::string& labels, SizeExpr rows, int64_t vocab) {
  // transformers ForCausalLMLoss: logits.float(), then cross_entropy =
  // log_softmax (keeps its f32 output) + nll_loss. The 16-bit logits stay alive
  // in the returned ModelOutput until backward is done (the upcast node keeps
  // them). The upcast is a node of its own because its backward is a step of
  // its own: nll_loss_backward fills a dense f32 gradient of the log-probs, and
  // log_softmax's backward writes the f32 gradient of the upcast logits while
  // that one and the saved log-probs are alive (12 bytes a logit); only then
  // does ToCopyBackward make the 16-bit gradient, beside the f32 one (6 bytes)
  // (tools/autograd/derivatives.yaml: nll_loss_forward, _log_softmax, _to_copy).
  const SizeExpr elements = times(rows, vocab);
  OpSpec upcast;
  upcast.name = name + ".upcast";
  upcast.op = "to_f32";
  upcast.inputs = {logits};
  upcast.out_elements = elements;
  upcast.out_dtype = DType::kF32;
  upcast.saves = {SavedRef{logits, SaveWhen::kAnyGrad}};
  const std::string logits_f32 = op(upcast);

  const std::string log_probs = name + ":log_probs";
  OpSpec spec;
  spec.name = name;
  spec.op = "loss";
  spec.inputs = {logits_f32, labels};
  spec.out_elements = SizeExpr::constant(1);
  spec.out_dtype = DType::kF32;
  spec.saves = {SavedRef{log_probs, SaveWhen::kAnyGrad}};
  spec.fwd_flops = elements.scaled(kSoftmaxFlopsPerElement);
  spec.bwd_input_flops = elements.scaled(2);
  const std::string loss = op(spec);
  // The causal-LM forward computes the loss itself while its frame and the base model's
  // output still bind the head's input: transformers 5.23.0 LlamaForCausalLM.forward
  // (`hidden_states = outputs.last_hidden_state`, `logits = self.lm_head(hidden_states)`,
  // then `self.loss_function(...)`; 4.44.2 the same with `outputs[0]`). A loss computed
  // by the caller drops the hold (planner/mechanisms/loss_variants.cc).
  if (const std::string head_input = linear_input_above(logits); !head_input.empty()) {
    graph_.nodes.back().holds.push_back(head_input);
  }
  // The f32 gradient of the log-probs, as two 16-bit compute elements (in f32
  // training this, like the upcast itself, over-counts: .float() is a no-op there).
  graph_.nodes.back().bwd_workspace_elements = elements.scaled(2);
  graph_.nodes.back().outputs.push_back(log_probs);
  graph_.nodes.back().fwd_io_elements += elements;
  add_tensor(log_probs, elements, DType::kF32);
  return loss;
}

graph::LayerGraph GraphBuilder::finish() {
  graph::LayerGraph out = std::move(graph_);
  graph_ = graph::LayerGraph{};
  tensor_index_.clear();
  node_names_.clear();
  return out;
}

}  // namespace headroom::models
