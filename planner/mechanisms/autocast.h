// PyTorch AMP: torch.autocast over an fp32 model (precision bf16-amp / fp16-amp).
// Autocast runs ops on its lower-precision list (mm, addmm, linear, matmul,
// convolution, scaled_dot_product_attention) on 16-bit copies of their fp32
// inputs and returns 16-bit outputs; ops on its fp32 list (layer_norm, softmax,
// the losses) and everything else run in what their inputs are, with type
// promotion (fp32 + bf16 = fp32) (aten/src/ATen/autocast_mode.cpp, cached_cast;
// autocast_mode.h's op lists). What that means for memory:
// - every matmul weight is cast to a 16-bit copy, which the matmul keeps for
//   its input gradient until backward (autocast caches the copy of a trainable
//   leaf for the rest of the forward; a frozen one is cast at each call);
// - the residual stream, norms and what follows them stay fp32, and each matmul
//   casts its fp32 input to its own 16-bit copy, which is what it keeps.
// docs/memory-model.md, "Precision".
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/layer_graph.h"

namespace headroom::planner {

// Appends to `nodes` a cast node `name` in `block` that reads `inputs` and writes
// the tensor `name` (appended to `tensors`): `elements` of `dtype` (unset: the
// compute dtype), moving `io_elements` compute-dtype elements of traffic.
void add_cast_node(std::vector<graph::Node>& nodes, std::vector<graph::Tensor>& tensors, const std::string& name,
                   int block, std::vector<std::string> inputs, graph::SizeExpr elements,
                   std::optional<graph::DType> dtype, graph::SizeExpr io_elements);

// What autocast runs over.
enum class AutocastWeights {
  kFp32Model,       // AMP over an fp32 model: every unquantized parameter is fp32
  kSixteenBitModel, // a 16-bit model: only the parameters the script upcast (Param::upcast_fp32) are
};

// Rewrites `graph` (its tensors' dtypes unset = the 16-bit compute dtype) for an
// autocast run: fp32 outputs where autocast leaves fp32, and a cast node before
// each lower-precision op for its fp32 weight ("<node>.weight_cast") and for each
// fp32 activation input ("<node>.cast:<input>"), which the op reads and keeps
// in place of the fp32 tensor. Ops on autocast's fp32 list run on fp32 copies of
// 16-bit inputs and return fp32: layer_norm (it keeps its fp32 copy of x, and of a
// 16-bit weight and bias, "<node>.affine_cast") and softmax without a dtype
// (fp32_set_opt_dtype). Over a 16-bit model fp32 starts only there, at the
// upcast weights and at fp32 graph inputs (an image processor's pixel_values).
// A bitsandbytes 4-bit linear fed an fp32 input computes on its 16-bit copy and
// returns fp32 (autocast.cc, copy_four_bit_output).
// `low`: autocast's 16-bit dtype. Softmax of an fp16 input to fp32 needs no copy
// on CUDA (SoftMax.cpp: _softmax(input, dim, half_to_float=true)); of bf16 it does.
void apply_autocast(graph::LayerGraph& graph, AutocastWeights weights = AutocastWeights::kFp32Model,
                    graph::DType low = graph::DType::kBF16);

// Autocast over a 16-bit model with fp32 LoRA adapters: transformers' Trainer
// with bf16=True runs the forward under torch.autocast (Accelerate's
// prepare_model wraps model.forward), so each adapted linear casts its fp32
// adapter weights to 16-bit copies, kept for backward ("<node>.adapter_cast_a",
// "_b").
// PEFT casts the layer's input to fp32 for the adapters and lora_A casts it
// back: each adapted linear keeps its own 16-bit copy of its input
// ("<node>.adapter_input_cast"; apply_autocast adds the same). Everything else
// is 16-bit already and is not copied.
void apply_autocast_to_fp32_adapters(graph::LayerGraph& graph);

// fp32 LoRA adapters on a 16-bit model with no autocast (a plain loop over
// model.bfloat16(), ZeRO-3 through DeepSpeed since it keeps PEFT's fp32
// parameters): PEFT casts each adapted linear's input to fp32 for lora_A
// (peft/tuners/lora/layer.py and bnb.py: _cast_input_dtype when autocast is off)
// and casts the adapters' result back, so lora_A keeps an fp32 copy of its input
// ("<node>.adapter_input_cast", or the fp32 dropout output) and lora_B the fp32 x·A.
void apply_fp32_adapters_without_autocast(graph::LayerGraph& graph);

// Per graph tensor: whether it is autocast's 16-bit cast of a trainable fp32 weight
// ("<node>.weight_cast" of a trainable weight, "<node>.adapter_cast_a/_b").
// autocast_mode.cpp `cached_cast` keeps such a cast (of a leaf that requires grad) in
// its cache until the outermost autocast region exits, the end of the model's forward,
// whose loss transformers computes inside it. A kept block saves the cast anyway; a
// checkpointed block's cast, which nothing saves, stays cached to the forward's end
// (the meta-device oracle, bench/oracle: Llama-3.2-1B in full under AMP with
// checkpointing). A frozen weight is cast at each call and not cached.
std::vector<bool> autocast_cached_casts(const graph::LayerGraph& graph);

// Elements of `node`'s trainable bias that autocast casts to 16 bits beside its fp32
// weight ("<node>.weight_cast" among its inputs) and caches to the forward's end:
// F.linear and the convolutions are on the lower-precision list, and cached_cast
// caches every fp32 leaf argument that requires grad, the bias as the weight
// (torch 2.11 aten/src/ATen/autocast_mode.cpp). No backward saves the cast (the bias's
// gradient is a sum of the output's), so only the cache holds it. The graph has no
// tensor for it (a few KiB per layer): the block profile counts it with the forward
// frame's holds from the next block on (BlockProfile::forward_frame). 0 for a frozen
// bias (cast at each call, freed with the op) or a node autocast leaves alone.
int64_t autocast_cached_bias_elements(const graph::Node& node);

}  // namespace headroom::planner

