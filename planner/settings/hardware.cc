#include "planner/settings/hardware.h"

#include <cassert>
#include <cctype>
#include <span>
#include <utility>

#include "planner/settings/gpu_rows.h"

namespace headroom::planner {
namespace {

using gpu_data::datacentre_rows;
using gpu_data::geforce_rows;
using gpu_data::GpuRow;
using gpu_data::kCublasWorkspaceDefaultBytes;
using gpu_data::kCublasWorkspaceHopperBytes;
using gpu_data::kCudaContextBytes;
using gpu_data::workstation_rows;

GpuSpec to_spec(const GpuRow& row) {
  GpuSpec gpu;
  gpu.id = row.id;
  gpu.name = row.name;
  for (const char* alias : row.aliases) {
    if (alias != nullptr) gpu.aliases.emplace_back(alias);
  }
  gpu.memory_bytes = row.memory_bytes;
  gpu.bf16_tflops = row.bf16_tflops;
  gpu.fp16_tflops = row.fp16_tflops;
  gpu.fp32_tflops = row.fp32_tflops;
  gpu.tf32_tflops = row.tf32_tflops;
  gpu.fp8_tflops = row.fp8_tflops;
  gpu.memory_bandwidth_gbps = row.memory_bandwidth_gbps;
  gpu.sm_count = row.sm_count;
  gpu.host_link_gbps = row.host_link_gbps;
  gpu.nvlink_gbps = row.nvlink_gbps;
  gpu.cuda_context_bytes = row.cuda_context_bytes;
  gpu.cublas_workspace_bytes = row.cublas_workspace_bytes;
  gpu.matmul_efficiency = row.matmul_efficiency;
  gpu.fp8_matmul_efficiency = row.fp8_matmul_efficiency;
  gpu.attention_forward_efficiency = row.attention_forward_efficiency;
  gpu.attention_backward_efficiency = row.attention_backward_efficiency;
  gpu.architecture = row.architecture;
  gpu.source = row.source;
  return gpu;
}

std::vector<GpuSpec> build_catalogue() {
  std::vector<GpuSpec> gpus;
  for (std::span<const GpuRow> rows : {geforce_rows(), workstation_rows(), datacentre_rows()}) {
    for (const GpuRow& row : rows) gpus.push_back(to_spec(row));
  }
  return gpus;
}

std::string to_lower(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

}  // namespace

const std::vector<GpuSpec>& gpu_catalogue() {
  static const std::vector<GpuSpec> catalogue = build_catalogue();
  return catalogue;
}

Result<GpuSpec> find_gpu(std::string_view id_or_alias) {
  const std::string wanted = to_lower(id_or_alias);
  for (const GpuSpec& gpu : gpu_catalogue()) {
    if (to_lower(gpu.id) == wanted) return gpu;
    for (const std::string& alias : gpu.aliases) {
      if (to_lower(alias) == wanted) return gpu;
    }
  }
  std::string known;
  for (const GpuSpec& gpu : gpu_catalogue()) {
    if (!known.empty()) known += ", ";
    known += gpu.id;
  }
  return Status::unsupported("gpu: unknown GPU '" + std::string(id_or_alias) + "' (expected one of: " + known +
                             "; `headroom gpus` lists them). For another GPU, give --gpu-mem SIZE with the "
                             "closest of these, or describe it in full with --gpu-file FILE "
                             "(docs/hardware.md)");
}

bool supports_bf16(const GpuSpec& gpu) { return gpu.bf16_tflops > 0; }

int64_t default_cuda_context_bytes() { return kCudaContextBytes; }

int64_t default_cublas_workspace_bytes(std::string_view architecture) {
  return architecture == "hopper" || architecture == "blackwell" ? kCublasWorkspaceHopperBytes
                                                                 : kCublasWorkspaceDefaultBytes;
}

GpuSpec with_memory(const GpuSpec& base, int64_t memory_bytes) {
  assert(memory_bytes > 0 && "with_memory: memory_bytes must be positive");
  GpuSpec gpu = base;
  gpu.memory_bytes = memory_bytes;
  return gpu;
}

}  // namespace headroom::planner
