// Building blocks shared by the LibTorch modules of the zoo (models/torch/):
// a Linear with an optional PEFT-style LoRA adapter, a fused RMSNorm, and the
// hook through which the executor runs checkpointable blocks. Only built with
// LibTorch (HEADROOM_WITH_TORCH); the planner never includes this.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "models/torch/nf4.h"

namespace headroom::models::torch_modules {

// nn.Linear plus an optional adapter: y = W x + b + B(A x) * alpha / r, with
// A [r, in] Kaiming-uniform and B [out, r] zero, so a fresh adapter changes
// nothing. Parameter names follow PEFT: "<name>.lora_A.weight".
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in, int64_t out, bool bias);
  // A bias-free linear over a weight another module owns and registers (tied
  // embeddings): it registers no parameter, so the weight is counted, trained
  // and saved once, as the planner's graph counts it (tied_to).
  explicit LinearImpl(torch::Tensor tied_weight);
  void add_lora(int64_t rank, double alpha, double dropout = 0);
  // QLoRA: the frozen weight becomes NF4 (models/torch/nf4.h). The parameter
  // "weight" keeps its name and holds the packed bytes, as bitsandbytes'
  // Params4bit does; absmax and the rest are buffers ("weight_absmax", ...).
  // Call after the module has its final device and dtype: Module::to would
  // convert the packed bytes too.
  void quantize_nf4(bool double_quant);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  torch::Tensor bias;
  torch::Tensor lora_a;
  torch::Tensor lora_b;
  double lora_scale = 0;
  double lora_dropout = 0;  // PEFT's lora_dropout on the adapter's input (training only)
  // fp32 adapters under transformers' Trainer with bf16=True over a 16-bit
  // model (planner/mechanisms/autocast.h, apply_autocast_to_fp32_adapters): PEFT casts x
  // to fp32 for the adapters, then autocast casts it, A and B to 16 bits for
  // each matmul. The executor runs no autocast, so it does these casts itself.
  bool adapter_autocast = false;
  // Autocast over the 16-bit model (enable_autocast): an fp32 input is cast to
  // the layer's 16-bit dtype for the matmul; a 4-bit layer, as bitsandbytes'
  // Linear4bit, copies its result back to fp32.
  bool autocast = false;
  std::optional<Nf4Weight> nf4;  // set by quantize_nf4
};
TORCH_MODULE(Linear);

// nn.LayerNorm over the last dimension, with a weight and bias when `affine`.
// Under autocast (enable_autocast) it runs on fp32 copies of a 16-bit input,
// weight and bias and returns fp32, as layer_norm on autocast's fp32 list does.
class LayerNormImpl : public torch::nn::Module {
 public:
  LayerNormImpl(int64_t width, double eps, bool affine = true);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  torch::Tensor bias;
  int64_t width;
  double eps;
  bool autocast = false;
};
TORCH_MODULE(LayerNorm);

// RMSNorm over the last dimension with a weight, as one autograd node that
// keeps only its input and the per-row f32 rstd, like the fused rms_norm
// kernels the planner's graph assumes (LibTorch's CPU rms_norm is composite
// and would also keep the normalised tensor).
class RMSNormImpl : public torch::nn::Module {
 public:
  // `transformers_ops`: transformers' LlamaRMSNorm as plain ops instead (f32
  // copy, rstd and the normalised tensor kept), as the planner's graph of a
  // Hugging Face config counts it (models::RmsNormStyle::kTransformers).
  explicit RMSNormImpl(int64_t width, double eps = 1e-5, bool transformers_ops = false);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  double eps;
  bool transformers_ops;
};
TORCH_MODULE(RMSNorm);

struct LoraOptions {
  int64_t rank = 0;  // 0: no adapters
  double alpha = 16;
  double dropout = 0;  // lora_dropout
  // Module names (or their last components, "to_out.0") that get adapters.
  std::set<std::string> targets;
  // fnmatch patterns of module names that get none, as the planner's
  // lora_skip and train_patterns (planner/mechanisms/trainability.cc).
  std::vector<std::string> skip;
};

// An empty child module `name` of `parent`: a name prefix for its children,
// as transformers' nested modules give ("attention.attention.query").
std::shared_ptr<torch::nn::Module> named_scope(torch::nn::Module& parent, const std::string& name);

// nn.LayerNorm(width, eps) with weight and bias.
LayerNorm layer_norm(int64_t width, double eps);

// Autocast over a 16-bit model, done by hand. transformers' Trainer, Accelerate
// and the diffusers scripts run a bf16 model's forward under torch.autocast
// (planner/mechanisms/autocast.h, AutocastWeights::kSixteenBitModel); the executor runs no
// torch.autocast, since LibTorch's CPU autocast has other op lists than CUDA's.
// So every Linear and LayerNorm under `root` does CUDA autocast's casts itself
// (linear on its lower-precision list, layer_norm on its fp32 list); the other
// ops promote as PyTorch's type promotion does (fp32 + bf16 = fp32).
void enable_autocast(torch::nn::Module& root);

// Bidirectional multi-head SDPA over projected q, k, v [B, S, heads * d], as
// the vision encoders' SDPA attention runs it: heads split by view and
// transpose, no mask, and the heads merged back into [B, S, heads * d].
// `dropout_p` on the probabilities (transformers passes the module's p while
// training): fused on a GPU, while LibTorch's CPU SDPA runs it on its math path.
// `causal`: SDPA's is_causal (CLIP's text encoder).
torch::Tensor encoder_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                int64_t heads, double dropout_p = 0.0, bool causal = false);

// Adds adapters to every Linear under `root` whose name ends in a target.
// Returns how many were added.
int add_lora_adapters(torch::nn::Module& root, const LoraOptions& lora);

// Freezes every parameter except the LoRA adapters (LoRA/QLoRA training).
void freeze_base(torch::nn::Module& root);

// Parameters of `module` that require grad, in registration order.
std::vector<torch::Tensor> trainable_parameters(torch::nn::Module& module);

// A checkpointable block as a function of its tensor inputs.
using BlockFn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

// How a model runs its checkpointable blocks, by the graph's block names
// ("model.layers.3", "transformer_blocks.0"). Empty: plain calls. The
// executor passes one that checkpoints the blocks a Plan names (executor/),
// so models/ does not depend on executor/.
using BlockRunner = std::function<std::vector<torch::Tensor>(const std::string& name, torch::nn::Module& block,
                                                             const BlockFn& fn, const std::vector<torch::Tensor>& inputs)>;

// Calls `runner` when set, else `fn(inputs)`.
std::vector<torch::Tensor> run_block(const BlockRunner& runner, const std::string& name, torch::nn::Module& block,
                                     const BlockFn& fn, const std::vector<torch::Tensor>& inputs);

// An encoder's layers, each taking and giving the hidden states, run in order
// as the blocks "<prefix>0", "<prefix>1", ... through `runner`.
template <typename Layer>
torch::Tensor run_encoder_layers(const BlockRunner& runner, const std::string& prefix, const std::vector<Layer>& layers,
                                 torch::Tensor hidden) {
  for (size_t i = 0; i < layers.size(); ++i) {
    Layer layer = layers[i];  // held by the block function for a recomputing backward
    const BlockFn fn = [layer](const std::vector<torch::Tensor>& in) mutable {
      return std::vector<torch::Tensor>{layer->forward(in[0])};
    };
    hidden = run_block(runner, prefix + std::to_string(i), *layer, fn, {hidden})[0];
  }
  return hidden;
}

}  // namespace headroom::models::torch_modules
