// The time model's per-node figures (docs/memory-model.md, "Time model"): each node's
// forward and backward kernel time and FLOPs on a GPU, as a roofline over its GEMM
// FLOPs and the bytes it moves, fused (compiled) or eager, with fp8 and dequantizing
// linears. `node_times` is declared in planner/time/block_profile.h, whose block
// profiles sum it; split from block_profile.cc, which keeps the memory walk.
#include <algorithm>
#include <string>

#include "graph/op_traits.h"
#include "planner/mechanisms/float8_linear.h"
#include "planner/mechanisms/gptq_linear.h"
#include "planner/time/block_profile.h"
#include "planner/time/gemm_waves.h"

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

}  // namespace headroom::planner
