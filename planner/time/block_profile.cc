#include "planner/time/block_profile.h"
#include "planner/time/backward_gradients.h"
#include "planner/mechanisms/autocast.h"

#include <algorithm>
#include <map>
#include <string>

#include "graph/op_traits.h"
#include "planner/mechanisms/float8_linear.h"
#include "planner/time/gemm_waves.h"
#include "planner/time/crossing_gradients.h"
#include "planner/mechanisms/gptq_linear.h"
#include "planner/mechanisms/reentrant_checkpoint.h"

namespace headroom::planner {
namespace {

using graph::DType;
using graph::GraphAnalysis;
using graph::LayerGraph;
using graph::Node;

// One kernel launch per node and pass: ~5 us is the usual CUDA launch latency
// seen from PyTorch eager mode (docs/memory-model.md, "Time model").
constexpr double kLaunchMs = 0.005;

// FlexAttention's generated kernels against FlashAttention-2 on the same work:
// 90% of its speed in forward, 85% in backward (PyTorch blog, "FlexAttention:
// The Flexibility of PyTorch with the Performance of FlashAttention", 2024-08).
constexpr double kFlexForwardSpeed = 0.90;
constexpr double kFlexBackwardSpeed = 0.85;

// flash-attn's Triton kernel against FlashAttention-2 on the same work (Dao,
// "FlashAttention-2", arXiv 2307.08691, Sec. 4.1, A100 80GB SXM4: FA2 is "around
// 1.3-1.5x faster than FlashAttention in Triton in the forward pass and around 2x
// faster in the backward pass"): the middle of the forward range and the backward
// figure. Measured on the A100 only; other GPUs take the same ratios.
constexpr double kTritonFlashForwardSpeed = 1 / 1.4;
constexpr double kTritonFlashBackwardSpeed = 1 / 2.0;

// How much slower than FlashAttention-2 a fused attention op's kernel runs, per pass.
double fused_attention_speed(const std::string& op, bool backward) {
  if (op == graph::op::kFlexAttention) return backward ? kFlexBackwardSpeed : kFlexForwardSpeed;
  if (op == graph::op::kTritonFlashAttention) return backward ? kTritonFlashBackwardSpeed : kTritonFlashForwardSpeed;
  return 1.0;
}

bool contains(const std::vector<int>& list, int value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

struct TensorFacts {
  std::vector<int64_t> bytes;             // accounted bytes per tensor
  std::vector<bool> read_by_later_block;  // some consumer lies in a later block
};

TensorFacts tensor_facts(const LayerGraph& graph, const GraphAnalysis& analysis, DType compute,
                         int64_t batch, int64_t seq, Accounting accounting) {
  TensorFacts facts;
  const size_t count = graph.tensors.size();
  facts.bytes.resize(count);
  facts.read_by_later_block.assign(count, false);
  for (size_t t = 0; t < count; ++t) {
    facts.bytes[t] = account(graph::tensor_bytes(graph.tensors[t], compute, batch, seq), accounting);
    if (analysis.producer[t] < 0) continue;
    const int block = graph.nodes[analysis.producer[t]].block;
    for (int consumer : analysis.consumers[t]) {
      if (graph.nodes[consumer].block > block) facts.read_by_later_block[t] = true;
    }
  }
  return facts;
}

// Peak bytes live while the block runs forward. With autograd the block's saved
// tensors stay; without it (checkpointed forward) only pending inputs stay, and
// what selective AC holds (`held`).
// `saved`: the block's saved tensors among the peak's bytes (with autograd only).
struct ForwardPeak {
  int64_t bytes = 0;
  int64_t saved = 0;
};

// The tensors live during a forward walk with their running totals: a count per
// tensor (entry_live may name one twice; an erase drops every copy, as std::erase
// on the list did), so each step costs its own inputs and outputs, not the live set.
class LiveTensors {
 public:
  LiveTensors(const TensorFacts& facts, const std::vector<char>& saved) : facts_(facts), saved_(saved) {
    copies_.assign(facts.bytes.size(), 0);
  }
  void add(int t) {
    ++copies_[t];
    bytes_ += facts_.bytes[t];
    if (saved_[t]) saved_bytes_ += facts_.bytes[t];
  }
  bool has(int t) const { return copies_[t] > 0; }
  void erase(int t) {
    const int64_t freed = facts_.bytes[t] * copies_[t];
    bytes_ -= freed;
    if (saved_[t]) saved_bytes_ -= freed;
    copies_[t] = 0;
  }
  int64_t bytes() const { return bytes_; }
  int64_t saved_bytes() const { return saved_bytes_; }

 private:
  const TensorFacts& facts_;
  const std::vector<char>& saved_;
  std::vector<int> copies_;
  int64_t bytes_ = 0;
  int64_t saved_bytes_ = 0;
};

std::vector<char> membership(size_t count, const std::vector<int>& members) {
  std::vector<char> in(count, 0);
  for (int t : members) in[static_cast<size_t>(t)] = 1;
  return in;
}

// A model_output node stands for the moment the model's forward has returned
// (graph::op::kModelOutput): Accelerate's convert_outputs_to_fp32 copies the returned
// tensors there (accelerate 1.15.0 utils/operations.py; mechanisms/output_fp32_copies.h),
// after the forward's frame let go of its locals (T5ForConditionalGeneration.forward's
// decoder output, read by lm_head alone). Live then: what the returned object holds (the
// node's holds), what autograd saved (`saved`) or a checkpoint holds (`is_held`), and what
// later blocks read.
void release_returned_frame(const LayerGraph& graph, const GraphAnalysis& analysis, int n, int block_index,
                            const std::vector<char>& saved, const std::vector<char>& is_held, LiveTensors& live) {
  const std::vector<int>& returned = analysis.node_holds[n];
  for (size_t t = 0; t < graph.tensors.size(); ++t) {
    const int id = static_cast<int>(t);
    if (!live.has(id) || saved[t] || is_held[t] || std::find(returned.begin(), returned.end(), id) != returned.end()) {
      continue;
    }
    const bool read_later = std::any_of(analysis.consumers[t].begin(), analysis.consumers[t].end(),
                                        [&](int c) { return graph.nodes[static_cast<size_t>(c)].block > block_index; });
    if (!read_later) live.erase(id);
  }
}

// Which forward of a block a walk prices. Under autograd alone, an entry input that no
// later block reads and nothing saves dies with its last reader in the block (the head's
// final norm reads the last layer's output, saves its fp32 copy, and the Python name is
// rebound to the norm's output: transformers 5.23.0 Qwen2Model.forward). A checkpoint
// holds its entry inputs through its first pass and its recompute (torch 2.11
// utils/checkpoint.py: _NoopSaveInputs, CheckpointFunction's ctx.save_for_backward).
enum class ForwardPass { kAutograd, kCheckpointed, kRecompute };

ForwardPeak forward_peak(const LayerGraph& graph, const GraphAnalysis& analysis, int block_index,
                         const TensorFacts& facts, const std::vector<int>& entry_live,
                         ForwardPass pass, const std::vector<int>& held, DType compute, int64_t batch,
                         int64_t seq, Accounting accounting) {
  const graph::BlockStructure& block = analysis.blocks[block_index];
  const size_t count = graph.tensors.size();
  const bool with_saves = pass != ForwardPass::kCheckpointed;
  const std::vector<char> saved = with_saves ? membership(count, block.saved_tensors) : std::vector<char>(count, 0);
  const std::vector<char> is_held = membership(count, held);
  std::vector<int> remaining(count, 0);
  for (int n : block.nodes) {
    for (int t : analysis.node_inputs[n]) ++remaining[t];
    for (int t : analysis.node_holds[n]) ++remaining[t];
  }
  const std::vector<char> entry = membership(count, entry_live);
  auto read_after_block = [&](int t) {
    return std::any_of(analysis.consumers[t].begin(), analysis.consumers[t].end(),
                       [&](int c) { return graph.nodes[static_cast<size_t>(c)].block > block_index; });
  };
  auto read_later = [&](int t) {
    return (entry[t] && pass == ForwardPass::kAutograd) ? read_after_block(t)
                                                          : facts.read_by_later_block[t];
  };
  auto kept = [&](int t) { return read_later(t) || saved[t] || is_held[t]; };
  LiveTensors live(facts, saved);
  for (int t : entry_live) live.add(t);
  ForwardPeak peak{live.bytes(), live.saved_bytes()};
  auto drop_if_done = [&](int t) {
    if (remaining[t] == 0 && !kept(t)) live.erase(t);
  };
  for (int n : block.nodes) {
    const Node& node = graph.nodes[n];
    if (node.op == graph::op::kModelOutput) release_returned_frame(graph, analysis, n, block_index, saved, is_held, live);
    for (int t : analysis.node_outputs[n]) {
      if (!analysis.persistent[t] && !live.has(t)) live.add(t);
    }
    const int64_t workspace = account(
        graph::dtype_bytes(compute, node.workspace_elements.at(batch, seq)), accounting);
    if (live.bytes() + workspace > peak.bytes) peak = {live.bytes() + workspace, live.saved_bytes()};
    for (int t : analysis.node_inputs[n]) {
      --remaining[t];
      drop_if_done(t);
    }
    for (int t : analysis.node_holds[n]) {
      --remaining[t];
      drop_if_done(t);
    }
    for (int t : analysis.node_outputs[n]) drop_if_done(t);
  }
  return peak;
}

// The recompute as CheckpointFunction.backward runs it (BlockProfile::reentrant_recompute_peak):
// autocast's cached casts of the block's inputs held to its end, the repeated casts
// of one input the cached tensor again. `plain`: the recompute's peak without them.
ForwardPeak reentrant_recompute_peak(const LayerGraph& graph, const GraphAnalysis& analysis, int block_index,
                                     const TensorFacts& facts, const std::vector<int>& entry_live,
                                     const std::vector<int>& held, DType compute, int64_t batch, int64_t seq,
                                     Accounting accounting, const ForwardPeak& plain) {
  const RecomputeCastCache cache = reentrant_cast_cache(graph, analysis, block_index);
  if (cache.held.empty()) return plain;
  TensorFacts cached = facts;
  for (int t : cache.shared) cached.bytes[static_cast<size_t>(t)] = 0;
  std::vector<int> kept = held;
  kept.insert(kept.end(), cache.held.begin(), cache.held.end());
  return forward_peak(graph, analysis, block_index, cached, entry_live, ForwardPass::kRecompute, kept,
                      compute, batch, seq, accounting);
}

// Time of a memory-bound kernel moving `bytes` at the bandwidth the time model gives.
double memory_ms(double bytes, double gbps, const TimeModelOptions& options) {
  return bytes / (gbps * 1e9 * options.bandwidth_efficiency) * 1e3;
}

double roofline_ms(double flops, double bytes, double tflops, double gbps,
                   const TimeModelOptions& options) {
  const double compute_ms = flops / (tflops * 1e12 * options.matmul_efficiency) * 1e3;
  return std::max(compute_ms, memory_ms(bytes, gbps, options));
}

// How much slower than a GEMM the fused attention kernel runs: its published
// efficiency against matmul_efficiency (1 when the GPU has no published figure).
double attention_slowdown(double attention_efficiency, const TimeModelOptions& options) {
  return attention_efficiency > 0 ? options.matmul_efficiency / attention_efficiency : 1.0;
}

// Bytes of weights a node's GEMM reads per pass: a copy in the compute dtype of
// every weight (a 4-bit one is dequantized first, below).
double weight_bytes(const Node& node, DType compute) {
  double bytes = 0;
  for (const graph::Param& param : node.params) {
    if (!param.tied_to.empty()) continue;
    bytes += static_cast<double>(param.elements()) * graph::dtype_bits(compute) / 8.0;
  }
  return bytes;
}

// A 4-bit weight is dequantized by a kernel of its own before each GEMM that
// reads it, forward and for dX in backward: bitsandbytes MatMul4Bit calls
// F.dequantize_4bit, then linear / matmul (bitsandbytes/autograd/_functions.py);
// torchao's NF4Tensor linear does the same. It reads half a byte and writes a
// compute-dtype copy per weight: memory bound, and not overlapped with the GEMM.
double dequantize_ms(const Node& node, DType compute, const GpuSpec& gpu, const TimeModelOptions& options) {
  double bytes = 0;
  for (const graph::Param& param : node.params) {
    if (!param.tied_to.empty() || (param.dtype != DType::kNF4 && param.dtype != DType::kFP4)) continue;
    bytes += static_cast<double>(param.elements()) * (0.5 + graph::dtype_bits(compute) / 8.0);
  }
  if (bytes == 0) return 0;
  return memory_ms(bytes, gpu.memory_bandwidth_gbps, options) + kLaunchMs;
}

// The casts of an fp8 linear's backward (the output gradient, and the 16-bit
// input again where it was saved so): memory-bound kernels of their own.
double float8_cast_ms(const Node& node, const GraphAnalysis& analysis, int n, DType compute, int64_t batch,
                      int64_t seq, const GpuSpec& gpu, const TimeModelOptions& options) {
  if (!analysis.needs_input_grad[n] && !analysis.needs_param_grad[n]) return 0;
  const double bytes = float8_backward_cast_bytes(node, compute, batch, seq);
  if (bytes == 0) return 0;
  return memory_ms(bytes, gpu.memory_bandwidth_gbps, options) + 2 * kLaunchMs;
}

// A GPTQ weight is unpacked by eager PyTorch ops in forward only (and again in a
// recompute, which is a forward): kGptqDequantizeKernels memory-bound kernels
// moving kGptqDequantizeBytesPerWeight per weight (planner/mechanisms/gptq_linear.h). Backward
// reuses the unpacked weight autograd kept.
// Compiled, inductor fuses those pointwise ops into one kernel that reads the packed
// codes and writes the 16-bit weight (kGptqCompiledUnpackBytesPerWeight), as the
// compile model prices every fused kernel: the bytes entering and leaving it.
double gptq_dequantize_ms(const Node& node, const GpuSpec& gpu, const TimeModelOptions& options, bool compiled) {
  double weights = 0;
  for (const graph::Param& param : node.params) {
    if (is_gptq_qweight(param)) weights += static_cast<double>(param.elements());
  }
  if (weights == 0) return 0;
  const double bytes = compiled ? kGptqCompiledUnpackBytesPerWeight : kGptqDequantizeBytesPerWeight;
  const int kernels = compiled ? 1 : kGptqDequantizeKernels;
  return memory_ms(weights * bytes, gpu.memory_bandwidth_gbps, options) + kernels * kLaunchMs;
}

// FLOPs of the backward parts a node runs: dX when an input needs a gradient,
// dW when it trains a parameter.
double backward_flops(const Node& node, const GraphAnalysis& analysis, int n, int64_t batch, int64_t seq) {
  double flops = 0;
  if (analysis.needs_input_grad[n]) flops += static_cast<double>(node.bwd_input_flops.at(batch, seq));
  if (analysis.needs_param_grad[n]) flops += static_cast<double>(node.bwd_param_flops.at(batch, seq));
  return flops;
}

// The FLOPs a linear node's GEMMs cost at the rate of a best-shaped GEMM: each of
// the base weight's three products (Y = X W^T into [rows, out]; dX = dY W into
// [rows, in]; dW = dY^T X into [out, in]) divided by the share of the GPU its
// output's tiles can use (planner/time/gemm_waves.h). What the node adds beyond them
// (LoRA's thin adapter products, a bias) is left as it is: those kernels are bound
// by memory traffic, which the roofline prices separately.
struct GemmFlops {
  double fwd = 0;
  double bwd = 0;
};

GemmFlops tiled_gemm_flops(const Node& node, const GraphAnalysis& analysis, int n, int64_t batch, int64_t seq,
                           double fwd_flops, double bwd_flops, const GpuSpec& gpu) {
  GemmFlops out{fwd_flops, bwd_flops};
  if (!node.linear || gpu.sm_count <= 0) return out;
  const int64_t rows = node.linear->rows.at(batch, seq);
  const int64_t in = node.linear->in_features;
  const int64_t out_features = node.linear->out_features;
  const double base = 2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out_features);
  if (rows <= 0 || base <= 0) return out;
  const auto stretch = [&](int64_t r, int64_t c, int64_t depth) {
    return base * (1.0 / gemm_wave_utilisation(r, c, depth, gpu.sm_count) - 1.0);
  };
  // Only the products the node has FLOPs for: its recorded FLOPs hold the base GEMM.
  if (fwd_flops >= base) out.fwd += stretch(rows, out_features, in);
  if (analysis.needs_input_grad[n] && node.bwd_input_flops.at(batch, seq) >= base) {
    out.bwd += stretch(rows, in, out_features);
  }
  if (analysis.needs_param_grad[n] && node.bwd_param_flops.at(batch, seq) >= base) {
    out.bwd += stretch(out_features, in, rows);
  }
  return out;
}

double tensors_bytes(const LayerGraph& graph, const std::vector<int>& tensors, DType compute,
                     int64_t batch, int64_t seq) {
  double bytes = 0;
  for (int t : tensors) bytes += static_cast<double>(graph::tensor_bytes(graph.tensors[t], compute, batch, seq));
  return bytes;
}

// A node inside a generated kernel: its FLOPs as in eager mode; the kernel's
// traffic and launch on its lead node (forward) and backward lead (backward).
NodeTimes fused_node_times(const LayerGraph& graph, const GraphAnalysis& analysis, int n,
                           const FusedKernel& kernel, DType compute, int64_t batch, int64_t seq,
                           double tflops, const GpuSpec& gpu, const TimeModelOptions& options) {
  const Node& node = graph.nodes[n];
  NodeTimes out;
  out.fwd_flops = static_cast<double>(node.fwd_flops.at(batch, seq));
  // A kernel of views only (a split between two matmuls, the qkv unbind before
  // attention) generates no code in forward: its outputs alias its input.
  const bool views_only = std::all_of(kernel.nodes.begin(), kernel.nodes.end(),
                                      [&](int k) { return graph.nodes[k].op == graph::op::kSplit; });
  double fwd_bytes = weight_bytes(node, compute);
  if (n == kernel.lead && !views_only) {
    fwd_bytes += tensors_bytes(graph, kernel.reads, compute, batch, seq) +
                 tensors_bytes(graph, kernel.writes, compute, batch, seq);
  }
  out.bwd_flops = backward_flops(node, analysis, n, batch, seq);
  const GemmFlops gemm = tiled_gemm_flops(node, analysis, n, batch, seq, out.fwd_flops, out.bwd_flops, gpu);
  out.fwd_ms = roofline_ms(gemm.fwd, fwd_bytes, tflops, gpu.memory_bandwidth_gbps, options) +
               (n == kernel.lead && !views_only ? kLaunchMs : 0.0);
  double bwd_bytes = analysis.needs_param_grad[n] ? weight_bytes(node, compute) : 0;
  if (n == kernel.backward_lead) {
    bwd_bytes += tensors_bytes(graph, kernel.saved, compute, batch, seq) +
                 tensors_bytes(graph, kernel.grads_in, compute, batch, seq) +
                 tensors_bytes(graph, kernel.grads_out, compute, batch, seq);
  }
  out.bwd_ms = roofline_ms(gemm.bwd, bwd_bytes, tflops, gpu.memory_bandwidth_gbps, options) +
               (n == kernel.backward_lead ? kLaunchMs : 0.0);
  return out;
}

// The tensor cores' peak for a node: fp8 for an fp8 linear, else the compute dtype's.
double peak_tflops(const GpuSpec& gpu, DType compute, bool fp8) {
  return fp8                      ? gpu.fp8_tflops
         : compute == DType::kF32 ? gpu.fp32_tflops
         : compute == DType::kF16 ? gpu.fp16_tflops
                                  : gpu.bf16_tflops;
}

// What an eager node moves in forward, in bytes.
struct EagerTraffic {
  double element_bytes = 0;  // one compute-dtype element
  double io = 0;             // activations read and written
  double weights = 0;        // weights, as the kernel reads them
};

EagerTraffic eager_traffic(const Node& node, DType compute, bool fp8, int64_t batch, int64_t seq) {
  EagerTraffic traffic;
  traffic.element_bytes = graph::dtype_bits(compute) / 8.0;
  traffic.io = static_cast<double>(node.fwd_io_elements.at(batch, seq)) * traffic.element_bytes +
               static_cast<double>(node.fwd_io_f32_elements.at(batch, seq)) * 4.0;
  traffic.weights = weight_bytes(node, fp8 ? DType::kF8E4M3 : compute);  // an fp8 GEMM reads the fp8 copy
  return traffic;
}

// The bytes an eager node's backward moves.
double eager_backward_bytes(const LayerGraph& graph, const Node& node, const EagerTraffic& traffic,
                            bool view_forward, bool param_grad, int64_t batch, int64_t seq) {
  // A view's backward reads the parts' gradients and writes the input's, once each
  // (its io), and so does a dtype cast's: ToCopyBackward converts the gradient
  // back with one copy (derivatives.yaml, _to_copy: _to_copy_backward). Other ops
  // read the gradient and what they saved, about twice theirs.
  // (torchao's fp8 casts, "<linear>.input_fp8" / ".weight_fp8" (float8_linear.cc),
  // keep the generic pricing.)
  const bool dtype_cast = node.op == graph::op::kCast && !node.name.ends_with("_fp8");
  const bool one_copy_backward = view_forward || dtype_cast;
  double bwd_bytes = (one_copy_backward ? traffic.io : 2 * traffic.io) + traffic.weights;
  if (node.op == graph::op::kFusedLinearCe && !node.outputs.empty()) {
    // Liger's fused linear cross-entropy made its gradients in forward; backward
    // scales them in place (element_mul_kernel): grad_input [BT, H] (its output's
    // size here) and grad_weight when the weight trains, each read and written.
    const graph::Tensor* grad_input = graph.find_tensor(node.outputs.front());
    const double grad_input_bytes =
        grad_input ? static_cast<double>(grad_input->elements.at(batch, seq)) * traffic.element_bytes : 0.0;
    bwd_bytes = 2 * grad_input_bytes + (param_grad ? 2 * traffic.weights : 0.0);
  }
  return bwd_bytes;
}

// node_times for a node that runs as its own kernel (eager, or an extern kernel when compiled).
NodeTimes eager_node_times(const LayerGraph& graph, const GraphAnalysis& analysis, int n, DType compute,
                           int64_t batch, int64_t seq, double tflops, const GpuSpec& gpu,
                           const TimeModelOptions& options, bool fp8) {
  const Node& node = graph.nodes[n];
  NodeTimes out;
  out.fwd_flops = static_cast<double>(node.fwd_flops.at(batch, seq));
  const EagerTraffic traffic = eager_traffic(node, compute, fp8, batch, seq);
  // A slower kernel costs as if it did proportionally more work at the same rate:
  // the fused attention kernel at its own efficiency, FlexAttention slower still.
  const bool attention = graph::op_traits(node.op).attention_kernel;
  const double attention_fwd = attention ? attention_slowdown(options.attention_forward_efficiency, options) : 1.0;
  const double attention_bwd = attention ? attention_slowdown(options.attention_backward_efficiency, options) : 1.0;
  const double dequantize = dequantize_ms(node, compute, gpu, options);
  // A linear is an extern kernel even when compiled (fused_kernels.h); its GPTQ
  // unpacking is pointwise, and fused when the run compiles.
  const double gptq_unpack = gptq_dequantize_ms(node, gpu, options, options.fused != nullptr);
  // torch.chunk / split / unbind return views of their input: no kernel runs in
  // forward. Their backward (SplitBackward, UnbindBackward: a cat or stack of
  // the parts' gradients) does write a new tensor.
  const bool view_forward = node.op == graph::op::kSplit;
  const bool input_grad = analysis.needs_input_grad[n];
  const bool param_grad = analysis.needs_param_grad[n];
  if (input_grad || param_grad) out.bwd_flops = backward_flops(node, analysis, n, batch, seq);
  const GemmFlops gemm = tiled_gemm_flops(node, analysis, n, batch, seq, out.fwd_flops, out.bwd_flops, gpu);
  out.fwd_ms = view_forward ? 0.0
                            : roofline_ms(gemm.fwd * attention_fwd / fused_attention_speed(node.op, false),
                                          traffic.io + traffic.weights, tflops, gpu.memory_bandwidth_gbps, options) +
                                  kLaunchMs + dequantize + gptq_unpack;
  if (!input_grad && !param_grad) return out;
  const double bwd_bytes = eager_backward_bytes(graph, node, traffic, view_forward, param_grad, batch, seq);
  out.bwd_ms = roofline_ms(gemm.bwd * attention_bwd / fused_attention_speed(node.op, true), bwd_bytes, tflops,
                           gpu.memory_bandwidth_gbps, options) + 2 * kLaunchMs + (input_grad ? dequantize : 0.0) +
               float8_cast_ms(node, analysis, n, compute, batch, seq, gpu, options);
  return out;
}

}  // namespace

NodeTimes node_times(const LayerGraph& graph, const GraphAnalysis& analysis, int n, DType compute,
                     int64_t batch, int64_t seq, const GpuSpec& gpu, const TimeModelOptions& given) {
  const Node& node = graph.nodes[n];
  // An fp8 linear runs its forward GEMM and both backward GEMMs as
  // torch._scaled_mm on the fp8 tensor cores (planner/mechanisms/float8_linear.h), at the
  // published fp8 matmul efficiency where there is one.
  const bool fp8 = is_float8_linear(node);
  TimeModelOptions options = given;
  if (fp8 && gpu.fp8_matmul_efficiency > 0) options.matmul_efficiency = gpu.fp8_matmul_efficiency;
  const double tflops = peak_tflops(gpu, compute, fp8);
  if (options.fused && options.fused->kernel_of[n] >= 0) {
    NodeTimes out = fused_node_times(graph, analysis, n, options.fused->kernels[options.fused->kernel_of[n]],
                                     compute, batch, seq, tflops, gpu, options);
    out.bwd_ms += float8_cast_ms(node, analysis, n, compute, batch, seq, gpu, options);
    return out;
  }
  return eager_node_times(graph, analysis, n, compute, batch, seq, tflops, gpu, options, fp8);
}

namespace {

// The block's forward, backward and recompute time and FLOPs, node by node.
void add_block_times(const LayerGraph& graph, const GraphAnalysis& analysis, const graph::BlockStructure& block,
                     const std::vector<int>& held, DType compute, int64_t batch, int64_t seq, const GpuSpec& gpu,
                     const TimeModelOptions& time_options, BlockProfile& profile) {
  const std::vector<char> is_held = membership(graph.tensors.size(), held);
  for (int n : block.nodes) {
    const NodeTimes times = node_times(graph, analysis, n, compute, batch, seq, gpu, time_options);
    profile.fwd_ms += times.fwd_ms;
    // A selectively saved op is not run again: its output comes from the cache.
    const bool cached = std::any_of(analysis.node_outputs[n].begin(), analysis.node_outputs[n].end(),
                                    [&](int t) { return is_held[t] != 0; });
    if (!cached) profile.recompute_ms += times.fwd_ms;
    profile.bwd_ms += times.bwd_ms;
    profile.model_flops += times.fwd_flops + times.bwd_flops;
  }
}

// The block's backward peaks from its stages: its saved bytes, the gradient of its
// outputs, and each stage's gradients in flight less what it released by then.
void add_backward_peaks(const BackwardStages& stages, BlockProfile& profile) {
  const int64_t base = profile.keep + profile.out_grad;
  const BackwardStage largest = stages.largest();
  profile.bwd_peak = base + largest.bytes;
  profile.bwd_peak_saved = profile.keep - largest.released;
  if (!stages.before_param_grads.empty() && !stages.from_param_grads.empty()) {
    profile.bwd_peak_before_param_grads = base + stages.before_param_grads.bytes;
    profile.bwd_peak_from_param_grads = base + stages.from_param_grads.bytes;
    profile.bwd_saved_before_param_grads = profile.keep - stages.before_param_grads.released;
    profile.bwd_saved_from_param_grads = profile.keep - stages.from_param_grads.released;
  }
  if (!stages.through_first_param_grads.empty() && !stages.after_first_param_grads.empty()) {
    profile.bwd_peak_through_first_param_grads = base + stages.through_first_param_grads.bytes;
    profile.bwd_peak_after_first_param_grads = base + stages.after_first_param_grads.bytes;
    profile.bwd_saved_through_first_param_grads = profile.keep - stages.through_first_param_grads.released;
    profile.bwd_saved_after_first_param_grads = profile.keep - stages.after_first_param_grads.released;
  }
  for (const GradPoint& point : stages.grad_points) {
    profile.bwd_points.push_back(
        {base + point.bytes, profile.keep - point.released, point.made_before, point.made_through});
  }
  profile.own_grads = stages.own_grads;
  if (!stages.before_params.empty() && !stages.from_params.empty()) {
    profile.bwd_peak_before_params = base + stages.before_params.bytes;
    profile.bwd_peak_from_params = base + stages.from_params.bytes;
    profile.bwd_saved_before_params = profile.keep - stages.before_params.released;
    profile.bwd_saved_from_params = profile.keep - stages.from_params.released;
  }
}

// What a checkpointed block keeps (BlockProfile::checkpoint): its entry inputs and what
// selective AC holds; among them, the inputs none of its nodes saves
// (BlockProfile::checkpoint_unsaved).
void add_checkpoint_bytes(const TensorFacts& facts, const std::vector<int>& entry_live,
                          const std::vector<int>& held, const std::vector<char>& saved, BlockProfile& profile) {
  for (int t : entry_live) {
    profile.checkpoint += facts.bytes[t];
    const bool unsaved = !saved[static_cast<size_t>(t)];
    profile.checkpoint_unsaved += unsaved ? facts.bytes[t] : 0;
  }
  for (int t : held) profile.checkpoint += facts.bytes[t];
}

// Whether a backward variant's fields are the block's own.
bool same_backward(const BlockProfile& variant, const BlockProfile& profile) {
  const bool same_points = std::equal(
      variant.bwd_points.begin(), variant.bwd_points.end(), profile.bwd_points.begin(), profile.bwd_points.end(),
      [](const BackwardPoint& a, const BackwardPoint& b) { return a.bytes == b.bytes && a.saved == b.saved; });
  return variant.bwd_peak == profile.bwd_peak && variant.bwd_peak_saved == profile.bwd_peak_saved && same_points &&
         variant.bwd_peak_before_param_grads == profile.bwd_peak_before_param_grads &&
         variant.bwd_peak_from_param_grads == profile.bwd_peak_from_param_grads &&
         variant.bwd_peak_through_first_param_grads == profile.bwd_peak_through_first_param_grads &&
         variant.bwd_peak_after_first_param_grads == profile.bwd_peak_after_first_param_grads;
}

// BlockProfile::unpacked_backward from the block's stages as a non-reentrant recompute
// runs them, kept only where they differ from the ordinary backward's.
void add_unpacked_backward(const BackwardStages& stages, BlockProfile& profile) {
  BlockProfile unpacked;
  unpacked.keep = profile.keep;
  unpacked.out_grad = profile.out_grad;
  add_backward_peaks(stages, unpacked);
  if (!same_backward(unpacked, profile)) profile.unpacked_backward = std::make_shared<const BlockProfile>(std::move(unpacked));
}

// BlockProfile::reentrant_backward: the block's backward as CheckpointFunction.backward
// runs it (BackwardGradients::of_reentrant_block), its saved bytes without the recompute's
// repeated casts of one input (reentrant_cast_cache: the cached tensor again), kept only
// where it differs from the ordinary backward.
void add_reentrant_backward(const LayerGraph& graph, const GraphAnalysis& analysis, const BackwardGradients& gradients,
                            int b, const TensorFacts& facts, BlockProfile& profile) {
  const graph::BlockStructure& block = analysis.blocks[static_cast<size_t>(b)];
  const std::vector<int> shared = reentrant_cast_cache(graph, analysis, b).shared;
  BlockProfile reentrant;
  reentrant.keep = profile.keep;
  for (int t : shared) reentrant.keep -= contains(block.saved_tensors, t) ? facts.bytes[static_cast<size_t>(t)] : 0;
  reentrant.out_grad = profile.out_grad;
  add_backward_peaks(gradients.of_reentrant_block(block, shared), reentrant);
  if (reentrant.keep != profile.keep || !same_backward(reentrant, profile)) {
    profile.reentrant_backward = std::make_shared<const BlockProfile>(std::move(reentrant));
  }
}

// The block's forward peaks: with grad, without (a checkpointed block's first pass),
// and its recomputation in backward, plain and reentrant.
void add_forward_peaks(const LayerGraph& graph, const GraphAnalysis& analysis, int b, const TensorFacts& facts,
                       const std::vector<int>& entry_live, const std::vector<int>& held, DType compute,
                       int64_t batch, int64_t seq, Accounting accounting, BlockProfile& profile) {
  static const std::vector<int> kNothing;
  const ForwardPeak forward =
      forward_peak(graph, analysis, b, facts, entry_live, ForwardPass::kAutograd, kNothing, compute, batch, seq,
                   accounting);
  profile.fwd_peak = forward.bytes;
  profile.fwd_peak_saved = forward.saved;
  profile.fwd_peak_nograd =
      forward_peak(graph, analysis, b, facts, entry_live, ForwardPass::kCheckpointed, held, compute, batch, seq,
                   accounting).bytes;
  const ForwardPeak recompute =
      forward_peak(graph, analysis, b, facts, entry_live, ForwardPass::kRecompute, held, compute, batch, seq,
                   accounting);
  profile.recompute_peak = recompute.bytes;
  profile.recompute_peak_saved = recompute.saved;
  const ForwardPeak reentrant = reentrant_recompute_peak(graph, analysis, b, facts, entry_live, held, compute, batch,
                                                         seq, accounting, recompute);
  profile.reentrant_recompute_peak = reentrant.bytes;
  profile.reentrant_recompute_peak_saved = reentrant.saved;
}

// The last block that reads tensor t (`producer_block` when no later one does): a
// tensor a forward frame holds is that block's input until then, and the frame's
// from the block after it (BlockProfile::forward_frame).
size_t last_reading_block(const LayerGraph& graph, const GraphAnalysis& analysis, int t, size_t producer_block) {
  size_t last = producer_block;
  for (int consumer : analysis.consumers[t]) last = std::max(last, static_cast<size_t>(graph.nodes[consumer].block));
  return last;
}

// The last block that reads or holds tensor t.
size_t last_use_block(const LayerGraph& graph, const GraphAnalysis& analysis, int t, size_t producer_block) {
  size_t last = last_reading_block(graph, analysis, t, producer_block);
  for (int holder : analysis.holders[t]) last = std::max(last, static_cast<size_t>(graph.nodes[holder].block));
  return last;
}

// A held_in_forward tensor some block beyond the next one reads (graph_analysis.cc,
// mark_lifetimes): live over a span of the forward, from the block after its own to its
// last reader or holder, as BlockProfile::forward_frame from here less the same from there.
// Otherwise a frame holds it from the block after its last reader to the forward's end.
void add_forward_frame(const LayerGraph& graph, const GraphAnalysis& analysis, int t, size_t b, int64_t bytes,
                       StepProfile& out) {
  const size_t last = last_reading_block(graph, analysis, t, b);
  if (last <= b + 1) {
    out.blocks[last].forward_frame += bytes;
    return;
  }
  out.blocks[b].forward_frame += bytes;
  out.blocks[last_use_block(graph, analysis, t, b)].forward_frame -= bytes;
}

// Whether t, an input of block b, is a far-read tensor whose span (add_forward_frame)
// already counts it.
bool counted_by_span(const LayerGraph& graph, const GraphAnalysis& analysis, int t, size_t b) {
  if (!analysis.held_in_forward[t] || analysis.producer[t] < 0) return false;
  return static_cast<size_t>(graph.nodes[analysis.producer[t]].block) + 1 < b;
}

}  // namespace

StepProfile profile_step(const LayerGraph& graph, const GraphAnalysis& analysis, DType compute,
                         int64_t batch, int64_t seq, Accounting accounting, const GpuSpec& gpu,
                         const TimeModelOptions& time_options,
                         const std::vector<std::vector<int>>& checkpoint_saves, int64_t grad_width) {
  const TensorFacts facts = tensor_facts(graph, analysis, compute, batch, seq, accounting);
  const BackwardGradients gradients(graph, analysis, facts.bytes, facts.read_by_later_block, compute, batch, seq,
                                    accounting, grad_width);
  const std::vector<bool> cached_casts = autocast_cached_casts(graph);
  const std::vector<int64_t> crossing = crossing_gradients(graph, analysis, facts.bytes);
  StepProfile out;
  for (size_t t = 0; t < graph.tensors.size(); ++t) {
    if (analysis.persistent[t]) out.persistent += facts.bytes[t];
  }
  out.made_persistent = made_persistent(graph, analysis, facts.bytes);
  out.blocks.resize(analysis.blocks.size());
  for (size_t b = 0; b < analysis.blocks.size(); ++b) {
    const graph::BlockStructure& block = analysis.blocks[b];
    BlockProfile& profile = out.blocks[b];
    profile.on_autograd = block.on_autograd;
    profile.checkpointable = graph.blocks[b].checkpointable;
    for (int t : block.saved_tensors) profile.keep += facts.bytes[t];

    // Boundary inputs the previous block already keeps are counted there.
    std::vector<int> entry_live;
    for (int t : block.boundary_inputs) {
      if (b > 0 && contains(analysis.blocks[b - 1].saved_tensors, t)) continue;
      if (counted_by_span(graph, analysis, t, b)) continue;
      entry_live.push_back(t);
    }
    static const std::vector<int> kNothing;
    const std::vector<int>& held = b < checkpoint_saves.size() ? checkpoint_saves[b] : kNothing;
    const std::vector<char> saved = membership(graph.tensors.size(), block.saved_tensors);
    if (block.on_autograd) add_checkpoint_bytes(facts, entry_live, held, saved, profile);
    add_forward_peaks(graph, analysis, static_cast<int>(b), facts, entry_live, held, compute, batch, seq, accounting,
                      profile);

    add_block_times(graph, analysis, block, held, compute, batch, seq, gpu, time_options, profile);
    for (int n : block.nodes) {
      for (int t : analysis.node_outputs[n]) {
        if (cached_casts[t] && block.on_autograd) profile.cast_cache += facts.bytes[t];
        if (analysis.held_in_forward[t] && !saved[t]) add_forward_frame(graph, analysis, t, b, facts.bytes[t], out);
        if (facts.read_by_later_block[t] && analysis.requires_grad[t] && !analysis.persistent[t]) {
          profile.out_grad += facts.bytes[t];
        }
        if (facts.read_by_later_block[t] && !analysis.persistent[t] && !saved[t]) {
          profile.outputs += facts.bytes[t];
        }
      }
    }
    // A gradient waiting across the block (crossing_gradients) is live through its
    // backward as its out_grad is.
    profile.out_grad += crossing[b];
    if (block.on_autograd) {
      add_backward_peaks(gradients.of_block(block), profile);
      add_unpacked_backward(gradients.of_block(block, true), profile);
      add_reentrant_backward(graph, analysis, gradients, static_cast<int>(b), facts, profile);
    }
  }
  return out;
}

}  // namespace headroom::planner
