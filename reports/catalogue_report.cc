#include "reports/catalogue_report.h"

#include "reports/text_table.h"
#include "reports/units.h"

namespace headroom::reports {

std::string gpus_table(const std::vector<planner::GpuSpec>& gpus) {
  TextTable table({"id", "name", "memory", "bf16 dense", "bandwidth", "NVLink"});
  table.set_left_aligned(1);
  for (const planner::GpuSpec& gpu : gpus) {
    table.add_row({gpu.id, gpu.name, format_gib(gpu.memory_bytes),
                   planner::supports_bf16(gpu) ? fixed(gpu.bf16_tflops, 1) + " TFLOPS"
                                               : "none (fp16 " + fixed(gpu.fp16_tflops, 1) + ")",
                   fixed(gpu.memory_bandwidth_gbps, 0) + " GB/s",
                   gpu.nvlink_gbps > 0 ? fixed(gpu.nvlink_gbps, 0) + " GB/s" : "-"});
  }
  return table.render();
}

std::string models_table(const std::vector<ModelSummary>& models) {
  TextTable table({"name", "parameters", "description"});
  table.set_left_aligned(2);
  for (const ModelSummary& model : models) {
    table.add_row({model.name, model.error.empty() ? format_count(model.parameters) : "?",
                   model.error.empty() ? model.description : "error: " + model.error});
  }
  return table.render();
}

nlohmann::json gpu_to_json(const planner::GpuSpec& gpu) {
  return {
      {"id", gpu.id},
      {"name", gpu.name},
      {"aliases", gpu.aliases},
      {"memory_bytes", gpu.memory_bytes},
      {"bf16_tflops", gpu.bf16_tflops},
      {"fp16_tflops", gpu.fp16_tflops},
      {"fp32_tflops", gpu.fp32_tflops},
      {"tf32_tflops", gpu.tf32_tflops},
      {"memory_bandwidth_gbps", gpu.memory_bandwidth_gbps},
      {"host_link_gbps", gpu.host_link_gbps},
      {"nvlink_gbps", gpu.nvlink_gbps},
      {"cuda_context_bytes", gpu.cuda_context_bytes},
      {"cublas_workspace_bytes", gpu.cublas_workspace_bytes},
      {"architecture", gpu.architecture},
      {"source", gpu.source},
  };
}

nlohmann::json gpus_to_json(const std::vector<planner::GpuSpec>& gpus) {
  nlohmann::json list = nlohmann::json::array();
  for (const planner::GpuSpec& gpu : gpus) list.push_back(gpu_to_json(gpu));
  return {{"command", "gpus"}, {"gpus", list}};
}

nlohmann::json models_to_json(const std::vector<ModelSummary>& models) {
  nlohmann::json list = nlohmann::json::array();
  for (const ModelSummary& model : models) {
    nlohmann::json entry = {
        {"name", model.name}, {"description", model.description}, {"parameters", model.parameters}};
    if (!model.error.empty()) entry["error"] = model.error;
    list.push_back(entry);
  }
  return {{"command", "models"}, {"models", list}};
}

}  // namespace headroom::reports
