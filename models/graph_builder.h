// GraphBuilder: assembles a LayerGraph one primitive at a time, with the
// saved-for-backward tensors PyTorch autograd keeps for that primitive
// (docs/models.md, "Save rules"). Every primitive adds one node (a few add two,
// e.g. a float32 softmax and its cast back) and returns the name of its main
// output tensor, which is also the node's name. Extra outputs are named
// "<node>:<what>" (":rstd", ":mean", ":mask", ":lse").
//
// Sizes are element counts as SizeExpr in the micro-batch B and sequence S;
// `rows` arguments are token counts (e.g. per_token(1) = B*S). Tensor dtypes
// left unset take the run's compute dtype. Names must be unique (asserted).
#pragma once

#include <cstdint>
#include <optional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/dtype.h"
#include "graph/layer_graph.h"
#include "graph/size_expr.h"

namespace headroom::models {

using graph::DType;
using graph::Param;
using graph::SavedRef;
using graph::SaveWhen;
using graph::SizeExpr;

// Shape of one attention call. Elements of q = query_rows * heads * head_dim,
// of k and v = key_rows * kv_heads * head_dim.
struct AttentionShape {
  int64_t heads = 0;
  int64_t kv_heads = 0;  // heads of the k, v tensors passed in (after any repeat_kv)
  int64_t head_dim = 0;
  SizeExpr query_rows;       // B*Sq
  SizeExpr key_rows;         // B*Sk
  SizeExpr scores_per_head;  // B*Sq*Sk, e.g. {bss=1} for self-attention over S
  bool causal = false;
  // A sliding-window layer's window in tokens (0: none). SDPA then takes a mask
  // from S = window on (sdpa_attention).
  int64_t sliding_window = 0;
};

struct EagerAttentionOptions {
  bool softmax_fp32 = false;  // softmax(dtype=float32).to(dtype), as HF Llama does
  double dropout = 0.0;       // attention-probability dropout p
};

// Any node not covered by a primitive. Saves may name inputs or `name` (the output).
struct OpSpec {
  std::string name;
  std::string op;
  std::vector<std::string> inputs;
  SizeExpr out_elements;
  std::optional<DType> out_dtype;
  std::vector<SavedRef> saves;
  std::vector<Param> params;
  SizeExpr fwd_flops;
  SizeExpr bwd_input_flops;
  SizeExpr bwd_param_flops;
  SizeExpr workspace_elements;
};

enum class NormKind { kLayerNorm, kRmsNorm };

class GraphBuilder {
 public:
  // dtype given to every parameter added from now on (as the checkpoint publishes it).
  void set_param_dtype(DType dtype) { param_dtype_ = dtype; }
  DType param_dtype() const { return param_dtype_; }

  // Starts a new block; later nodes belong to it. Blocks must come in execution order.
  void begin_block(std::string name, std::string kind, bool checkpointable);

  // A graph input (no producer): token ids, labels, precomputed embeddings, ...
  std::string input(const std::string& name, SizeExpr elements, std::optional<DType> dtype,
                    bool requires_grad);

  // y = x W^T + b over `rows` rows. Saves x (kParamGrad). `conv1d`: GPT-2's
  // Conv1D stores the weight as [in, out].
  std::string linear(const std::string& module, const std::string& x, SizeExpr rows, int64_t in,
                     int64_t out, bool bias, bool conv1d = false);

  // Norm over the last dim of `width`, `rows` rows. Saves x and the f32 per-row
  // statistics (rstd; mean too for LayerNorm). `affine`: has a weight; `bias`:
  // and a bias (LayerNorm).
  std::string norm(const std::string& module, const std::string& x, SizeExpr rows, int64_t width,
                   NormKind kind, bool affine, bool bias);

  // transformers' RMSNorm written as Python ops (LlamaRMSNorm and its copies):
  // x32 = x.to(f32); rstd = rsqrt(x32.pow(2).mean(-1) + eps); n = (x32 * rstd).to(x.dtype);
  // y = weight * n. Autograd keeps x32 and rstd when x requires grad (pow, rsqrt, mul)
  // and n when the weight is trainable: 6 bytes per value under bf16 where a fused
  // kernel keeps 2. `normalized_f32`: GemmaRMSNorm multiplies in f32 ((1 + w) * n32),
  // so n is kept as f32. Extra outputs ":x32", ":rstd", ":normalized".
  std::string python_rms_norm(const std::string& module, const std::string& x, SizeExpr rows,
                              int64_t width, bool normalized_f32);

  // GELU (exact or tanh), SiLU, ReLU as one fused kernel: saves x (kInputGrad);
  // ReLU saves its output instead (its backward reads the result).
  std::string activation(const std::string& name, const std::string& x, SizeExpr elements,
                         const std::string& kind);

  // a * b, both activations: saves both (kInputGrad). Broadcasting allowed: the
  // output has `elements`.
  std::string mul(const std::string& name, const std::string& a, const std::string& b,
                  SizeExpr elements);
  // x * c where c never requires grad (RoPE cos/sin): saves c only.
  std::string mul_const(const std::string& name, const std::string& x, const std::string& c,
                        SizeExpr elements);
  // a + b: saves nothing.
  std::string add(const std::string& name, const std::string& a, const std::string& b,
                  SizeExpr elements);
  // Reshape/copy/concat/rotate-half/masking: a new tensor, nothing saved.
  std::string copy(const std::string& name, const std::string& op,
                   const std::vector<std::string>& inputs, SizeExpr elements,
                   std::optional<DType> dtype = std::nullopt);
  // Splits x into parts (views in PyTorch, new names here); nothing saved.
  std::vector<std::string> split(const std::string& name, const std::string& x,
                                 const std::vector<std::pair<std::string, SizeExpr>>& parts);

  // Dropout with probability p: saves a bool mask (kInputGrad). p == 0 adds no
  // node and returns x (PyTorch returns the input unchanged).
  std::string dropout(const std::string& name, const std::string& x, SizeExpr elements, double p);

  // Embedding lookup of int64 `ids` (`rows` of them): saves the ids (kParamGrad).
  std::string embedding(const std::string& module, const std::string& ids, SizeExpr rows,
                        int64_t vocab, int64_t dim);

  // Attention as separate matmul/softmax/dropout/matmul ops. Returns the output
  // [query_rows, heads*head_dim]. Nodes "<prefix>.qk", ".scores", ".softmax",
  // (".softmax_cast"), (".dropout"), ".pv".
  std::string eager_attention(const std::string& prefix, const std::string& q,
                              const std::string& k, const std::string& v,
                              const AttentionShape& shape, const EagerAttentionOptions& options);
  // Fused scaled_dot_product_attention / flash: node "<prefix>.sdpa". Saves q,
  // k, v, the output and the f32 logsumexp; dropout inside keeps no mask. With a
  // sliding window, also node "<prefix>.sdpa_mask": the additive [B, 1, Sq, Sk]
  // mask in the compute dtype, made once S reaches the window and kept by the
  // memory-efficient kernel (tensor min_seq; docs/models.md, "Sliding-window masks").
  std::string sdpa_attention(const std::string& prefix, const std::string& q,
                             const std::string& k, const std::string& v,
                             const AttentionShape& shape);
  // flash-attn's Triton kernel: node "<prefix>.triton_flash", op
  // "triton_flash_attention". Its forward keeps q, k, v, out and the f32 logsumexp
  // as SDPA's flash backend does (flash_attn_triton.py FlashAttnFunc.forward:
  // ctx.save_for_backward(q, k, v, o, lse, bias)); only its speed differs.
  std::string triton_flash_attention(const std::string& prefix, const std::string& q,
                                     const std::string& k, const std::string& v,
                                     const AttentionShape& shape);
  // flex_attention: node "<prefix>.flex", op "flex_attention". Keeps what SDPA
  // keeps and the f32 row maxima (FlexAttentionAutogradOp.forward saves q, k, v,
  // out, logsumexp and max_scores; torch/_higher_order_ops/flex_attention.py,
  // torch 2.11). The same FLOPs: a causal block mask skips the masked tiles.
  std::string flex_attention(const std::string& prefix, const std::string& q,
                             const std::string& k, const std::string& v,
                             const AttentionShape& shape);

  // HF causal-LM cross entropy on `logits` [rows, vocab] with int64 `labels`:
  // node "<name>.upcast" (logits.float(), keeps the 16-bit logits: the returned
  // output holds them), then node `name` (log_softmax + nll_loss, keeps the f32
  // log-probs). The loss node holds the head's input (the causal-LM forward's
  // frame binds it while the loss runs). Output: the f32 scalar loss.
  std::string lm_loss(const std::string& name, const std::string& logits,
                      const std::string& labels, SizeExpr rows, int64_t vocab);
  // The input of the first linear node up `tensor`'s chain of first inputs (the
  // head's input above its logits and a softcap), or empty.
  std::string linear_input_above(const std::string& tensor) const;

  std::string op(const OpSpec& spec);

  // Adds parameters to an existing node (e.g. EVA's separate q_bias, v_bias).
  void add_params(const std::string& node, std::vector<Param> params);
  // Keeps `tensor` referenced until `node` (an existing node) has run (Node::holds).
  void hold_until(const std::string& node, const std::string& tensor);
  Param param(const std::string& name, std::vector<int64_t> shape) const;

  const graph::LayerGraph& graph() const { return graph_; }
  graph::LayerGraph& mutable_graph() { return graph_; }
  // Moves the graph out; the builder is empty afterwards.
  graph::LayerGraph finish();

  SizeExpr elements_of(const std::string& tensor) const;

 private:
  void add_tensor(const std::string& name, SizeExpr elements, std::optional<DType> dtype,
                  bool requires_grad = false);
  graph::Node& add_node(const std::string& name, const std::string& op,
                        std::vector<std::string> inputs, std::vector<std::string> outputs);

  graph::LayerGraph graph_;
  DType param_dtype_ = DType::kBF16;
  // The fused attention kernels: node `name` of op `op_name`, keeping q, k, v,
  // the output and one f32 statistic per query row and head per `row_stats`
  // suffix.
  std::string fused_attention(const std::string& name, const std::string& op_name, const std::string& q,
                              const std::string& k, const std::string& v, const AttentionShape& shape,
                              const std::vector<std::string>& row_stats);

  std::map<std::string, size_t> tensor_index_;  // name -> index in graph_.tensors (a lookup per input: never a scan)
  std::set<std::string> node_names_;
};

// rows * width as an element count.
inline SizeExpr times(SizeExpr rows, int64_t width) { return rows.scaled(width); }

}  // namespace headroom::models
