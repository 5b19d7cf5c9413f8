// LayerGraph: what the planner knows of a model. A DAG of nodes (modules or ops)
// that read and write named tensors, own parameters, and say which tensors they
// save for backward and under which condition. Nodes are grouped into an ordered
// chain of blocks, the unit of activation checkpointing and offload.
//
// Sizes of activations are element counts as polynomials in the micro-batch B
// and sequence length S (SizeExpr). Tensors whose dtype is unset take the run's
// compute dtype (bf16 under mixed precision, f32 in fp32 training), so one graph
// serves every precision. The JSON form is documented in docs/layer-graph-format.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/dtype.h"
#include "graph/size_expr.h"

namespace headroom::graph {

inline constexpr int kLayerGraphFormatVersion = 1;

struct Param {
  std::string name;  // full name, e.g. "layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;
  DType dtype = DType::kBF16;  // dtype as published; the run's precision may change it
  bool trainable = true;
  // Non-empty: this is the same storage as the parameter named here (tied
  // embeddings); it is counted once, and its trainability follows the original.
  std::string tied_to;
  // A module buffer (BatchNorm's running_mean, running_var, num_batches_tracked):
  // in the state dict and on the device, but never trained (trainable is false)
  // and not one of the model's parameters (not in parameter_count()).
  bool buffer = false;
  // False for a buffer registered persistent=False (RoPE's cos/sin caches,
  // models/rope_caches.h): on the device, but in no state dict or checkpoint.
  bool persistent = true;
  // Kept in fp32 whatever the run's precision: the training script upcast it
  // (PEFT's prepare_model_for_kbit_training; planner/mechanisms/kbit_prep.h), or
  // the module made it fp32 and nothing casts it (torchtune's RoPE cache).
  bool upcast_fp32 = false;

  int64_t elements() const;  // product of shape; 1 for a scalar
};

// When a node keeps a tensor alive for its backward.
enum class SaveWhen {
  kInputGrad,  // when some input of the node requires grad (e.g. GELU keeps its input)
  kParamGrad,  // when the node has a trainable parameter (a linear keeps its input x for dW)
  kAnyGrad,    // when either holds (the node is on the autograd graph at all)
  // when an input of the node other than the saved tensor requires grad: a
  // product a*b keeps a only for db (and b only for da), so a frozen operand's
  // partner is not kept (LoRA and frozen modulation, e.g. Flux's AdaLN).
  kOtherInputGrad,
};

struct SavedRef {
  std::string tensor;
  SaveWhen when = SaveWhen::kAnyGrad;
};

struct Tensor {
  std::string name;
  SizeExpr elements;            // element count in B and S
  std::optional<DType> dtype;   // unset: the run's compute dtype
  // A graph input: whether it needs a gradient. A produced tensor: whether it
  // requires grad whatever its producer (a forward hook's requires_grad_(True),
  // transformers' enable_input_require_grads; planner/mechanisms/input_require_grads.h).
  bool requires_grad = false;
  // Made only when the sequence is at least this long (0: always); shorter, it
  // takes no memory. transformers' sliding-window SDPA mask (models/graph_builder.h).
  int64_t min_seq = 0;
};

// Shape facts of an nn.Linear, so LoRA adapters and quantization can be applied.
struct LinearInfo {
  int64_t in_features = 0;
  int64_t out_features = 0;
  SizeExpr rows;  // number of input rows, e.g. B*S tokens
};

struct Node {
  std::string name;  // module path, e.g. "layers.3.self_attn.q_proj"; unique
  std::string op;    // "linear", "attention", "norm", "activation", "dropout", "embedding",
                     // "add", "mul", "loss", ... (informational, and for LoRA/QLoRA: "linear")
  int block = 0;     // index into LayerGraph::blocks
  std::vector<std::string> inputs;   // tensor names read
  std::vector<std::string> outputs;  // tensor names written (produced here)
  std::vector<Param> params;
  std::vector<SavedRef> saves;
  // Tensors the forward keeps referenced until this node has run, though it does
  // not read them: a module's argument its Python call holds while the module's
  // later ops run (BertOutput.forward holds the GELU output through its dense,
  // dropout, residual add and LayerNorm). No gradient, not saved for backward.
  std::vector<std::string> holds;
  SizeExpr fwd_flops;
  SizeExpr bwd_input_flops;   // FLOPs of the input-gradient part of backward
  SizeExpr bwd_param_flops;   // FLOPs of the weight-gradient part of backward
  SizeExpr fwd_io_elements;   // activation elements read + written in forward (roofline)
  // Float32 elements read + written in forward besides those, at 4 bytes whatever
  // the compute dtype: the upcast intermediates of ops written in Python (an
  // RMSNorm's x.float(), pow, mean, multiply and cast back are five kernels).
  SizeExpr fwd_io_f32_elements;
  SizeExpr workspace_elements;  // transient scratch during forward/backward, compute dtype
  // Scratch of the backward when it differs from the forward's (the loss: the
  // gradients of its fp32 intermediates); unset: workspace_elements.
  std::optional<SizeExpr> bwd_workspace_elements;
  const SizeExpr& backward_workspace() const { return bwd_workspace_elements ? *bwd_workspace_elements : workspace_elements; }
  std::optional<LinearInfo> linear;
  // Times one forward applies this node's weights in turn, each use's weight gradient
  // reaching autograd's input buffer on its own (torchtune's eager chunked output runs
  // the output projection once per chunk). Set by the planner's loss rewrite; not stored.
  int weight_uses = 1;
};

struct Block {
  std::string name;  // e.g. "layers.3"
  std::string kind;  // e.g. "llama_decoder", "flux_double_stream", "embedding", "head"
  bool checkpointable = true;  // false for embeddings, heads and losses
};

// How the sequence axis S is set for this model.
struct SequenceSpec {
  std::string unit = "tokens";  // "tokens" or "image" (S from resolution)
  int64_t default_seq = 512;    // S used when the user gives none
  int64_t max_seq = 8192;       // largest S the model supports (context or resolution limit)
  // For unit == "image": S = images * (resolution / patch_px)^2 + extra_tokens.
  int64_t patch_px = 0;
  int64_t images = 1;
  int64_t extra_tokens = 0;
  int64_t default_resolution = 0;
};

struct LayerGraph {
  int version = kLayerGraphFormatVersion;
  std::string name;         // e.g. "llama-3-8b"
  std::string family;       // e.g. "llama"
  std::string description;  // one line for `headroom models`
  std::string source;       // where the architecture numbers come from (config URL, paper)
  SequenceSpec sequence;
  std::vector<std::string> lora_targets;  // default LoRA target module suffixes
  std::vector<Block> blocks;
  std::vector<Tensor> tensors;
  std::vector<Node> nodes;  // any order; analysis derives the execution order

  int64_t parameter_count() const;  // untied parameters, buffers excluded (as module.parameters())
  int64_t trainable_parameter_count() const;
  const Tensor* find_tensor(const std::string& name) const;
  const Node* find_node(const std::string& name) const;
  // Index in `nodes` of the node that writes `tensor`, or -1 (a graph input).
  int producer_of(const std::string& tensor) const;
};

}  // namespace headroom::graph
