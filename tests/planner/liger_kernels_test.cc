// Liger's RMSNorm and gated-MLP kernels (--liger-kernels on, the Trainer's
// use_liger_kernel; planner/mechanisms/liger_kernels.h), bytes read from each autograd
// Function's save_for_backward in liger-kernel 0.8.5, on Llama 3.2 1B cut to two layers
// (tests/data/hf/llama-3.2-1b-2layers: hidden 2048, intermediate 8192).
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "graph/dtype.h"
#include "planner/mechanisms/liger_kernels.h"
#include "planner/settings/stack.h"
#include "planner/time/backward_gradients.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

constexpr int64_t kBatch = 1;
constexpr int64_t kSeq = 512;
constexpr int64_t kTokens = kBatch * kSeq;
constexpr int64_t kHidden = 2048;
constexpr int64_t kIntermediate = 8192;
constexpr int64_t kLayers = 2;

RunSettings trainer_llama(bool liger) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b-2layers/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.mode = TrainMode::kFull;
  s.micro_batch = kBatch;
  s.seq_len = kSeq;
  s.checkpointing = CheckpointPolicy::kNone;
  s.stack = Stack::kHfTrainer;
  if (liger) s.liger_kernels = true;
  return s;
}

const graph::Node& node(const ModelContext& context, const std::string& name) {
  const graph::Node* found = context.graph.find_node(name);
  REQUIRE_MESSAGE(found != nullptr, name);
  return *found;
}

// Bytes of every tensor some node keeps for backward, each counted once (bf16 compute).
int64_t saved_bytes(const ModelContext& context) {
  std::set<std::string> saved;
  for (const graph::Node& n : context.graph.nodes) {
    for (const graph::SavedRef& ref : n.saves) saved.insert(ref.tensor);
  }
  int64_t bytes = 0;
  for (const std::string& name : saved) {
    const graph::Tensor* tensor = context.graph.find_tensor(name);
    if (tensor == nullptr) continue;  // a parameter
    bytes += graph::dtype_bytes(tensor->dtype.value_or(graph::DType::kBF16), tensor->elements.at(kBatch, kSeq));
  }
  return bytes;
}

int node_index(const graph::LayerGraph& graph, const std::string& name) {
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (graph.nodes[n].name == name) return static_cast<int>(n);
  }
  FAIL("no node " << name);
  return -1;
}

// Gradients in flight at the backward of node `name` (BackwardGradients::at_node).
int64_t backward_bytes_at(const ModelContext& c, const std::string& name) {
  std::vector<int64_t> bytes(c.graph.tensors.size());
  for (size_t t = 0; t < bytes.size(); ++t) {
    bytes[t] = graph::tensor_bytes(c.graph.tensors[t], c.compute_dtype, kBatch, kSeq);
  }
  const std::vector<bool> arriving(bytes.size(), false);
  const BackwardGradients gradients(c.graph, c.analysis, bytes, arriving, c.compute_dtype, kBatch, kSeq,
                                    Accounting::kAllocated, 0);
  return gradients.at_node(node_index(c.graph, name));
}

}  // namespace

TEST_CASE("liger kernels: the gated product's backward writes da and db into a and b") {
  // ops/swiglu.py swiglu_backward: _swiglu_backward_kernel(dc, a, b) and `return a, b`.
  // Only the incoming dc (bf16, tokens x intermediate) is in flight; the eager mul would
  // hold both input gradients beside it (3 x), and silu's backward one more.
  const ModelContext liger = prepared_context(trainer_llama(true));
  CHECK(backward_bytes_at(liger, "model.layers.0.mlp.act_mul_up") == 2 * kTokens * kIntermediate);
  const ModelContext model_modules = prepared_context(trainer_llama(false));
  CHECK(backward_bytes_at(model_modules, "model.layers.0.mlp.act_mul_up") == 3 * 2 * kTokens * kIntermediate);
}

TEST_CASE("fused linear cross-entropy: a tied embedding's partial adds in place into its fresh grad_weight") {
  // LigerFusedLinearCrossEntropyFunction hands on the grad_weight it made in forward (a
  // dense tensor of its own), so the embedding's partial (bf16, vocab x hidden) is the one
  // transient there; after an nn.Linear head (a transposed view) the sum is made beside it.
  constexpr int64_t kVocab = 128256;
  RunSettings fused = trainer_llama(false);
  fused.loss = LossSpec{LossImpl::kFusedLinearCe, 8};
  const int64_t after_fused = backward_bytes_at(prepared_context(fused), "model.embed_tokens");
  const int64_t after_linear = backward_bytes_at(prepared_context(trainer_llama(false)), "model.embed_tokens");
  CHECK(after_linear - after_fused == 2 * kVocab * kHidden);
}

TEST_CASE("liger kernels: off unless given, and the Trainer's row says so") {
  CHECK_FALSE(resolve_stack(trainer_llama(false)).top.liger_kernels);
  CHECK(resolve_stack(trainer_llama(true)).top.liger_kernels);
  CHECK(resolve_stack(trainer_llama(true)).bottom.liger_kernels);
}

TEST_CASE("liger kernels: LigerRMSNorm keeps X and an fp32 rstd, no fp32 copy of x, no normalized tensor") {
  const ModelContext context = prepared_context(trainer_llama(true));
  const graph::Node& norm = node(context, "model.layers.0.input_layernorm");
  REQUIRE(norm.saves.size() == 2);
  CHECK(norm.saves[0].tensor == norm.inputs.front());
  CHECK(norm.saves[1].tensor == "model.layers.0.input_layernorm:rstd");
  const graph::Tensor* rstd = context.graph.find_tensor("model.layers.0.input_layernorm:rstd");
  REQUIRE(rstd != nullptr);
  CHECK(graph::dtype_bytes(*rstd->dtype, rstd->elements.at(kBatch, kSeq)) == 4 * kTokens);
  CHECK(context.graph.find_tensor("model.layers.0.input_layernorm:x32") == nullptr);
  CHECK(context.graph.find_tensor("model.layers.0.input_layernorm:normalized") == nullptr);
}

TEST_CASE("liger kernels: LigerSiLUMulFunction keeps the gate and up projections, never makes silu(gate)") {
  const ModelContext context = prepared_context(trainer_llama(true));
  const graph::Node& gate = node(context, "model.layers.0.mlp.gate_proj");
  const graph::Node& up = node(context, "model.layers.0.mlp.up_proj");
  const graph::Node& product = node(context, "model.layers.0.mlp.act_mul_up");
  CHECK(product.op == kLigerGatedMulOp);
  REQUIRE(product.inputs.size() == 2);
  CHECK(product.inputs[0] == gate.outputs.front());  // a
  CHECK(product.inputs[1] == up.outputs.front());    // b
  CHECK(saves(product, gate.outputs.front()));
  CHECK(saves(product, up.outputs.front()));
  CHECK(product.saves.size() == 2);
  // silu(a) is recomputed in backward: no node makes it.
  CHECK(context.graph.find_node("model.layers.0.mlp.act_fn") == nullptr);
  // One kernel: a and b read, c written, each tokens x intermediate.
  CHECK(product.fwd_io_elements.at(kBatch, kSeq) == 3 * kTokens * kIntermediate);
}

TEST_CASE("liger kernels: two layers of Llama 3.2 1B keep 36 MiB less at B=1, S=512") {
  // Per decoder layer, each of its two norms keeps X (2 bytes an element) for the fp32
  // copy of x (4) and the bf16 normalized tensor (2): 4 bytes an element less; the MLP
  // no longer keeps silu(gate) (2 bytes an element of the intermediate width).
  // The final norm, once more. rstd (fp32 per row) is kept either way.
  const int64_t per_layer = 2 * 4 * kTokens * kHidden + 2 * kTokens * kIntermediate;
  const int64_t expected = kLayers * per_layer + 4 * kTokens * kHidden;
  CHECK(expected == 36 * 1024 * 1024);
  const int64_t model_modules = saved_bytes(prepared_context(trainer_llama(false)));
  const int64_t liger = saved_bytes(prepared_context(trainer_llama(true)));
  CHECK(model_modules - liger == expected);
}

}  // namespace headroom::planner
