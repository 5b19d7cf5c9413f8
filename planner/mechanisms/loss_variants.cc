#include "planner/mechanisms/loss_variants.h"

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/op_traits.h"
#include "planner/mechanisms/chunked_head.h"
#include "planner/mechanisms/graph_edits.h"

namespace headroom::planner {
namespace {

graph::Tensor* find_tensor(graph::LayerGraph& graph, const std::string& name) {
  for (graph::Tensor& tensor : graph.tensors) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

// The node that writes `tensor` (the upcast before a loss, the LM head before that), or null.
graph::Node* producing_node(graph::LayerGraph& graph, const std::string& tensor) {
  const int index = graph.producer_of(tensor);
  return index < 0 ? nullptr : &graph.nodes[index];
}

// Removes a one-input, one-output node: its readers read its input instead.
void bypass(graph::LayerGraph& graph, const std::string& node_name) {
  const auto it = std::find_if(graph.nodes.begin(), graph.nodes.end(),
                               [&](const graph::Node& n) { return n.name == node_name; });
  if (it == graph.nodes.end()) return;
  const std::string input = it->inputs.front();
  const std::string output = it->outputs.front();
  graph.nodes.erase(it);
  std::erase_if(graph.tensors, [&](const graph::Tensor& t) { return t.name == output; });
  for (graph::Node& node : graph.nodes) std::replace(node.inputs.begin(), node.inputs.end(), output, input);
}

// Scratch the node holds in forward only (compute-dtype elements); its backward
// scratch stays what it was.
void add_forward_workspace(graph::Node& node, const graph::SizeExpr& elements) {
  if (!node.bwd_workspace_elements) node.bwd_workspace_elements = node.workspace_elements;
  node.workspace_elements = node.workspace_elements + elements;
}

// torch.compile over the upcast and cross-entropy of one logits tensor (a chunk,
// or all of them). Inductor fuses the upcast into the max / sum-exp reductions,
// so no fp32 copy is ever materialised, and the min-cut partitioner saves the
// graph's 16-bit input plus the reductions' outputs (a reduction whose output is
// under a quarter of its input may not be recomputed;
// torch/_functorch/partitioners.py should_ban_recomputation) rather than the fp32
// log-probabilities, recomputing the pointwise rest in backward, which writes the
// 16-bit gradient directly. What stays of the log-probabilities is those two fp32
// statistics per row (max and log-sum-exp): the log_probs tensor shrinks to them.
void compile_cross_entropy(graph::LayerGraph& graph, graph::Node& loss, const graph::Node& upcast,
                           graph::Tensor& log_probs, std::vector<std::string>& to_bypass) {
  const std::string logits_name = upcast.inputs.front();
  to_bypass.push_back(upcast.name);
  const graph::Node* head = producing_node(graph, logits_name);
  if (head != nullptr && head->linear) {
    log_probs.elements = head->linear->rows.scaled(2);
    log_probs.dtype = graph::DType::kF32;
  } else {
    drop_save(loss, log_probs.name);
  }
  loss.saves.push_back({logits_name, graph::SaveWhen::kAnyGrad});
  loss.workspace_elements = graph::SizeExpr{};
  loss.bwd_workspace_elements = graph::SizeExpr{};
}

// Liger's fused linear cross-entropy (liger_kernel/ops/fused_linear_cross_entropy.py,
// LigerFusedLinearCrossEntropyFunction; the model's lce_forward hands it the last
// hidden states and lm_head.weight, so the [B*S, V] logits never exist). Its forward
// walks the rows in chunks of chunk_size = next_power_of_2(ceil(BT / ceil(V / H)))
// (at most BT): the chunk's 16-bit logits, which the cross-entropy kernel overwrites
// with their gradient, then grad_input[chunk] = dlogits @ W and, for a trainable W,
// grad_weight += dlogits^T @ x. grad_input = zeros_like(x) and grad_weight =
// zeros_like(W) are allocated first; the function saves them for backward, which only
// scales them by the incoming gradient (element_mul_kernel, in place) and returns
// them. So the head keeps a [BT, H] tensor (the "logits" tensor is resized to it),
// and its forward holds, besides: one chunk of logits (chunk * V <= 2 * BT * H + V:
// the power of two at most doubles BT / ceil(V / H)), grad_weight when W trains (in
// the weight's dtype: fp32 under AMP) and loss_1d (fp32, BT). Under AMP the fp32 W is
// cast to 16 bits for the chunk matmuls: once and cached for the forward when it
// trains (autocast caches leaves that require grad), per chunk when frozen; either
// way one 16-bit copy at a time. All three products run in forward; backward adds none.
void fuse_linear_cross_entropy(graph::LayerGraph& graph, graph::Node& loss, const graph::Node& upcast,
                               graph::Tensor& logits, graph::Tensor& log_probs, bool fp32_weights,
                               std::vector<std::string>& to_bypass) {
  graph::Node* head = producing_node(graph, logits.name);
  if (head == nullptr || !head->linear || head->params.empty()) return;
  const graph::LinearInfo shape = *head->linear;
  const graph::Param& weight = head->params.front();
  const bool weight_trains = weight.trainable;
  const graph::SizeExpr rows = shape.rows;
  const int64_t hidden = shape.in_features;
  const int64_t vocab = shape.out_features;
  to_bypass.push_back(upcast.name);
  const graph::SizeExpr gemm = rows.scaled(2 * hidden * vocab);
  head->fwd_flops = gemm.scaled(weight_trains ? 3 : 2);
  head->bwd_input_flops = graph::SizeExpr{};
  head->bwd_param_flops = graph::SizeExpr{};
  // x read, grad_input written; the chunk logits written by the first GEMM, read and
  // rewritten by the cross-entropy kernel, read by the other GEMMs.
  head->fwd_io_elements = rows.scaled(2 * hidden) + rows.scaled(vocab * (weight_trains ? 5 : 4));
  graph::SizeExpr transient = rows.scaled(2 * hidden) + graph::SizeExpr::constant(vocab) + rows.scaled(2);
  const int64_t weight_elements = hidden * vocab;
  if (weight_trains) transient += graph::SizeExpr::constant(weight_elements * (fp32_weights ? 2 : 1));
  if (fp32_weights) transient += graph::SizeExpr::constant(weight_elements);
  head->workspace_elements = transient;
  head->bwd_workspace_elements = graph::SizeExpr{};
  head->linear.reset();  // one fused kernel sequence now, not an nn.Linear to adapt or tile
  head->op = std::string(graph::op::kFusedLinearCe);
  logits.elements = rows.scaled(hidden);
  logits.dtype.reset();
  head->saves.push_back({logits.name, graph::SaveWhen::kAnyGrad});
  // The loss node is what the function returns: the sum of loss_1d, nothing saved.
  drop_save(loss, log_probs.name);
  log_probs.elements = graph::SizeExpr::constant(1);
  loss.fwd_flops = rows;
  loss.fwd_io_elements = rows.scaled(2);
  loss.workspace_elements = graph::SizeExpr{};
  loss.bwd_workspace_elements = graph::SizeExpr{};
  loss.bwd_input_flops = graph::SizeExpr{};
}

// One loss node and the tensors around it that every variant rewrites.
struct LossSite {
  graph::Node& node;
  graph::Node& upcast;        // the .float() before the loss
  graph::Tensor& logits;      // the upcast's 16-bit input
  graph::Tensor& logits_f32;  // the upcast's output, the loss's input
  graph::Tensor& log_probs;
};

// Rewrites that change graph.nodes or graph.tensors, applied after the walk over them.
struct PendingEdits {
  std::vector<std::string> to_chunk;   // split after the loop: splitting reallocates graph.nodes
  std::vector<std::string> to_bypass;  // upcast nodes the variant has no use for
  std::vector<graph::Tensor> to_add;   // new graph inputs (adding reallocates graph.tensors)
};

// The loss node's site when it reads upcast logits and writes NAME:log_probs; nullopt otherwise.
std::optional<LossSite> find_loss_site(graph::LayerGraph& graph, graph::Node& node) {
  if (node.op != graph::op::kLoss || node.inputs.empty()) return std::nullopt;
  const std::string log_probs_name = node.name + ":log_probs";
  if (std::find(node.outputs.begin(), node.outputs.end(), log_probs_name) == node.outputs.end()) {
    return std::nullopt;
  }
  graph::Node* upcast = producing_node(graph, node.inputs.front());
  if (upcast == nullptr || upcast->op != graph::op::kToF32 || upcast->inputs.empty()) return std::nullopt;
  graph::Tensor* logits = find_tensor(graph, upcast->inputs.front());
  graph::Tensor* logits_f32 = find_tensor(graph, node.inputs.front());
  graph::Tensor* log_probs = find_tensor(graph, log_probs_name);
  if (logits == nullptr || logits_f32 == nullptr || log_probs == nullptr) return std::nullopt;
  return LossSite{node, *upcast, *logits, *logits_f32, *log_probs};
}

// transformers Trainer.compute_loss returns only the loss, so the output
// holding the 16-bit logits is gone before backward; cross_entropy keeps
// only its fp32 log-probabilities (trainer.py, loss/loss_utils.py).
// Compiled, the loss itself saves the 16-bit logits (torchtitan
// components/loss.py compiles cross_entropy_loss: `del pred` then frees nothing).
void full_loss(graph::LayerGraph& graph, LossSite& site, bool compiled, PendingEdits& pending) {
  if (compiled) {
    compile_cross_entropy(graph, site.node, site.upcast, site.log_probs, pending.to_bypass);
    return;
  }
  drop_save(site.upcast, site.logits.name);
  // The model's output still holds the 16-bit logits while the loss runs
  // forward inside it (transformers' causal-LM forward returns them beside the
  // loss); they go when compute_loss returns. Forward only.
  add_forward_workspace(site.node, site.logits.elements);
}

// torchtune: the fp32 upcast and cross-entropy run chunk by chunk, and the
// fp32 log-probabilities of every chunk stay saved until backward; the recipe
// deletes the logits before backward (modules/loss/ce_chunked_output_loss.py,
// recipes/*). CEWithChunkedOutputLoss (torchtune <= 0.5, and the published
// cases) gets all 16-bit chunks from the model at once, so the logits keep
// their full size here; LinearCrossEntropyLoss (0.6+) never holds more than a
// chunk, which this over-counts by 2*T*V*(1 - 1/N) rather than risk under-counting.
void chunked_loss(graph::LayerGraph& graph, LossSite& site, int chunks, bool compiled, PendingEdits& pending) {
  if (compiled) {
    // torchtune compile_loss compiles compute_cross_entropy (upcast + cross-entropy)
    // per chunk (training/_compile.py).
    compile_cross_entropy(graph, site.node, site.upcast, site.log_probs, pending.to_bypass);
    pending.to_chunk.push_back(site.node.name);
    return;
  }
  // The eager model projects each chunk with the same weight (TransformerDecoder.chunked_output,
  // torchtune/modules/transformer.py 0.6.1): its gradient comes in `chunks` partials
  // (planner/time/backward_gradients.cc partial_gradients).
  if (const int head = graph.producer_of(site.logits.name); head >= 0 && graph.nodes[head].linear) {
    graph.nodes[head].weight_uses = chunks;
  }
  // One chunk's f32 copy and, in backward, its gradients at a time.
  drop_save(site.upcast, site.logits.name);
  site.logits_f32.elements = site.logits_f32.elements.divided_up(chunks);
  if (site.node.bwd_workspace_elements) {
    site.node.bwd_workspace_elements = site.node.bwd_workspace_elements->divided_up(chunks);
  }
  // The recipe holds the model's list of 16-bit chunks until the loss returns
  // (`del logits` after `self._loss_fn(logits, labels)`, recipes/full_finetune_single_device.py
  // 0.6.1): every chunk is live while the last one's cross-entropy runs (the oracle, env tt).
  add_forward_workspace(site.node, site.logits.elements);
}

// Model code that computes its own loss the pre-4.46 transformers way, e.g.
// Qwen (v1) remote code QWenLMHeadModel.forward: shift_logits =
// lm_logits[..., :-1, :].contiguous() (a 16-bit copy of the logits), then
// CrossEntropyLoss, which autocast runs in fp32 (log_softmax keeps its fp32
// output). Saved as `full`; the copy is one more compute-dtype element per
// logit alive with the fp32 upcast (`shift_copied`, see contiguous_shift_copies).
// The output is dropped by the Trainer.
void shift_copy_loss(LossSite& site, bool shift_copied) {
  drop_save(site.upcast, site.logits.name);
  if (shift_copied) site.upcast.workspace_elements = site.upcast.workspace_elements + site.logits.elements;
}

// transformers before 4.49: the causal-LM forwards up to 4.45 (modeling_llama.py
// `logits = logits.float()`, then `shift_logits = logits[..., :-1, :].contiguous()`),
// ForCausalLMLoss from 4.46 to 4.48 (loss_utils.py, the same two lines) until
// huggingface/transformers#35646 shifted the labels instead. The shifted copy is a
// second fp32 tensor of the logits' size, alive with the upcast while cross-entropy
// runs forward. Backward is `full`'s: the slice's zero-padded fp32 gradient replaces
// the shifted one's, with the log-probabilities already freed (the meta-device
// oracle on transformers 4.44: bench/oracle). The output is dropped by the Trainer.
// `shift_copied`: whether the slice is copied at all (contiguous_shift_copies).
void upcast_shift_loss(LossSite& site, graph::DType compute, bool shift_copied) {
  drop_save(site.upcast, site.logits.name);
  if (!shift_copied) return;
  add_forward_workspace(site.node, site.logits_f32.elements.scaled(4 / graph::dtype_bytes(compute, 1)));
}

// `logits[..., :-1, :].contiguous()` copies only a slice that is not contiguous: with
// one row in the micro-batch, [1, S - 1, V] of a contiguous [1, S, V] is contiguous
// (torch's is_contiguous passes over a dimension of size 1) and .contiguous() returns
// it, no copy (the oracle: Qwen2-MoE-2L under transformers 4.44.2 at b1 s512, no
// shifted copy beside the fp32 logits and the log-probabilities). Unknown (0): priced.
bool contiguous_shift_copies(int64_t micro_batch) { return micro_batch != 1; }

// flash-attn's fused cross-entropy (flash_attn/losses/cross_entropy.py,
// SoftmaxCrossEntropyLossFn, the loss_fn llm-foundry's MPT defaults to): one
// xentropy kernel reads the 16-bit logits without an fp32 copy, and
// save_for_backward keeps the logits, the fp32 log-sum-exp per row and the
// labels; backward writes the 16-bit logits' gradient (not in place).
void fused_xentropy_loss(graph::LayerGraph& graph, LossSite& site, PendingEdits& pending) {
  pending.to_bypass.push_back(site.upcast.name);
  site.node.saves.push_back({site.logits.name, graph::SaveWhen::kAnyGrad});
  if (const graph::Node* head = producing_node(graph, site.logits.name); head != nullptr && head->linear) {
    site.log_probs.elements = head->linear->rows;
    site.log_probs.dtype = graph::DType::kF32;
  } else {
    drop_save(site.node, site.log_probs.name);
  }
  site.node.workspace_elements = graph::SizeExpr{};
  site.node.bwd_workspace_elements = graph::SizeExpr{};
}

// litgpt chunked_cross_entropy: no .float(), so log_softmax runs and saves in
// the logits' dtype and there is no fp32 copy; the logits stay referenced
// through backward (litgpt/utils.py, finetune/lora.py). In backward the
// gradient of the 16-bit log-probs is alive with the logits' gradient.
void no_upcast_loss(LossSite& site, PendingEdits& pending) {
  pending.to_bypass.push_back(site.upcast.name);
  site.node.saves.push_back({site.logits.name, graph::SaveWhen::kAnyGrad});
  site.log_probs.dtype.reset();
  site.node.workspace_elements = graph::SizeExpr{};
  site.node.bwd_workspace_elements = site.logits.elements;
}

// litgpt's finetune scripts under Lightning Fabric (litgpt 0.5.13, lightning 2.6.6).
// _FabricModule.forward hands the model's output to precision.convert_output, which
// casts every floating tensor to torch.get_default_dtype(), fp32
// (lightning/fabric/wrappers.py; plugins/precision/half.py HalfPrecision, amp.py,
// bitsandbytes.py convert_output), so chunked_cross_entropy (litgpt/utils.py) runs
// on fp32 logits: log_softmax saves fp32 log-probabilities. fit binds the fp32
// logits to `logits`, which holds them through backward and the optimizer step
// until the next forward's are bound (finetune/full.py, lora.py fit): one fp32
// T x V tensor alive the whole step, a graph input here ("<loss>:held_logits"),
// and at the cast the next one and the 16-bit logits beside it, 10*T*V bytes,
// which the loss's forward holds as that input, its 16-bit input and its fp32
// log-probabilities. The upcast node goes: its copy is the held one.
// full.py (`chunked_head` false) calls model(input_ids) and
// chunked_cross_entropy(logits[..., :-1, :], ...): backward concatenates the
// chunks' fp32 gradients (cat, T x V) and pads that for the slice
// (slice_backward, T x V fp32) beside the held logits, 12*T*V bytes; here the
// 16-bit input gradient and a backward workspace of the rest stand for them.
// lora.py calls model(input_ids, lm_head_chunk_size=128): a list of 128-token
// chunks, whose backward runs one chunk at a time, so the head's peak is the
// forward's; the loss's backward holds the fp32 log-probabilities' bytes beside
// the input gradient, as a workspace.
// The fp32 log-probabilities are an output here, not saved: at either peak what
// their bytes stand for is in flight, the next logits' fp32 copy at the cast and
// cat's and slice_backward's gradients in backward, after each chunk's loss released
// its own (docs/memory-model.md, "Categories at the peak"). The bytes are the same:
// the output is live at the loss's forward, and its 4 bytes a logit are in the
// backward workspace instead of among the saved tensors.
constexpr std::string_view kHeldLogits = ":held_logits";

void litgpt_loss(LossSite& site, bool chunked_head, graph::DType compute, PendingEdits& pending) {
  pending.to_bypass.push_back(site.upcast.name);
  const std::string held = site.node.name + std::string(kHeldLogits);
  pending.to_add.push_back(graph::Tensor{held, site.logits_f32.elements, graph::DType::kF32, false});
  site.node.inputs.push_back(held);
  site.node.fwd_io_elements += site.upcast.fwd_io_elements;
  site.node.fwd_io_f32_elements += site.upcast.fwd_io_f32_elements;
  site.node.workspace_elements = graph::SizeExpr{};
  drop_save(site.node, site.log_probs.name);
  // lora.py: the log-probabilities' 4 bytes a logit; full.py: 8 bytes a logit (cat and
  // slice_backward) less the 16-bit input gradient's.
  const int64_t width = graph::dtype_bytes(compute, 1);
  site.node.bwd_workspace_elements = site.logits.elements.scaled(chunked_head ? 4 / width : 8 / width - 1);
}

// Losses the caller computes from the logits the model returned: the model's forward
// frame, which held the head's input while a transformers causal-LM computed its own
// loss (models/graph_builder.cc lm_loss), is gone by then. torchtune's recipes
// (`logits = self._model(**batch)`, then `self._loss_fn(logits, labels)`,
// recipes/full_finetune_single_device.py 0.6.1), litgpt's fit (finetune/lora.py 0.5.13),
// torchtitan's train step (`pred = model(inputs)`, then `loss_fn(pred, labels)`) and
// llm-foundry's ComposerMPTCausalLM.loss.
bool loss_outside_model(LossImpl impl) {
  switch (impl) {
    case LossImpl::kFullKeepLogits:
    case LossImpl::kChunked:
    case LossImpl::kNoUpcast:
    case LossImpl::kFusedXentropy:
    case LossImpl::kLitgptFull:
    case LossImpl::kLitgptLora:
      return true;
    default:
      return false;
  }
}

void release_head_input(graph::LayerGraph& graph) {
  for (graph::Node& node : graph.nodes) {
    if (node.op == graph::op::kLoss) node.holds.clear();
  }
}

void rewrite_loss(graph::LayerGraph& graph, LossSite& site, const LossSpec& loss, bool compiled,
                  bool fp32_weights, graph::DType compute, int64_t micro_batch, PendingEdits& pending) {
  switch (loss.impl) {
    case LossImpl::kFullKeepLogits:
      // Compiled (torchtitan's build_cross_entropy_loss under --training.compile):
      // the saved 16-bit logits are the ones the caller keeps anyway.
      compile_cross_entropy(graph, site.node, site.upcast, site.log_probs, pending.to_bypass);
      break;
    case LossImpl::kFull:
      full_loss(graph, site, compiled, pending);
      break;
    case LossImpl::kChunked:
      chunked_loss(graph, site, loss.chunks, compiled, pending);
      break;
    case LossImpl::kShiftCopy:
      shift_copy_loss(site, contiguous_shift_copies(micro_batch));
      break;
    case LossImpl::kUpcastShift:
      upcast_shift_loss(site, compute, contiguous_shift_copies(micro_batch));
      break;
    case LossImpl::kFusedXentropy:
      fused_xentropy_loss(graph, site, pending);
      break;
    case LossImpl::kFusedLinearCe:
    // Unsloth's fused loss keeps what Liger's does (grad_inputs, saved in forward); its
    // chunk is sized at the run's tokens by unsloth_fused_ce_chunks (mechanisms/unsloth_model.h).
    case LossImpl::kUnslothFusedCe:
    case LossImpl::kUnslothFusedCeEager:
      fuse_linear_cross_entropy(graph, site.node, site.upcast, site.logits, site.log_probs, fp32_weights,
                                pending.to_bypass);
      break;
    case LossImpl::kNoUpcast:
      no_upcast_loss(site, pending);
      break;
    case LossImpl::kLitgptFull:
      litgpt_loss(site, false, compute, pending);
      break;
    case LossImpl::kLitgptLora:
      litgpt_loss(site, true, compute, pending);
      break;
    case LossImpl::kTrlFusedHead:
      break;  // sized at the run's tokens: apply_trl_fused_head (model_context.cc)
  }
}

}  // namespace

bool held_by_caller(const graph::Tensor& tensor) { return tensor.name.ends_with(kHeldLogits); }

void apply_loss_impl(graph::LayerGraph& graph, const LossSpec& loss, bool compiled, bool fp32_weights,
                     graph::DType compute, int64_t micro_batch) {
  if (loss_outside_model(loss.impl)) release_head_input(graph);
  if (loss.impl == LossImpl::kFullKeepLogits && !compiled) return;
  PendingEdits pending;
  for (graph::Node& node : graph.nodes) {
    std::optional<LossSite> site = find_loss_site(graph, node);
    if (site) rewrite_loss(graph, *site, loss, compiled, fp32_weights, compute, micro_batch, pending);
  }
  for (graph::Tensor& tensor : pending.to_add) graph.tensors.push_back(std::move(tensor));
  for (const std::string& name : pending.to_bypass) bypass(graph, name);
  for (const std::string& name : pending.to_chunk) split_head_into_chunks(graph, name, loss.chunks);
}

}  // namespace headroom::planner
