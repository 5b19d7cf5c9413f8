#include "planner/plan.h"

#include <nlohmann/json.hpp>
#include <optional>

namespace headroom::planner {

int64_t MemoryBreakdown::total() const {
  return cuda_context + workspaces + parameters + gradients + optimizer_states + master_weights +
         zero_buffers + activations + transient + allocator;
}

nlohmann::json breakdown_to_json(const MemoryBreakdown& m) {
  return {
      {"cuda_context_bytes", m.cuda_context},   {"workspaces_bytes", m.workspaces},
      {"parameters_bytes", m.parameters},       {"gradients_bytes", m.gradients},
      {"optimizer_states_bytes", m.optimizer_states}, {"master_weights_bytes", m.master_weights},
      {"zero_buffers_bytes", m.zero_buffers},   {"activations_bytes", m.activations},
      {"transient_bytes", m.transient},         {"allocator_bytes", m.allocator},
      {"total_bytes", m.total()},
  };
}

nlohmann::json prediction_to_json(const Prediction& p) {
  nlohmann::json j;
  j["fits"] = p.fits();
  j["fits_gpu"] = p.fits_gpu;
  j["fits_host"] = p.fits_host;
  j["fits_disk"] = p.fits_disk;
  j["gpu_total_bytes"] = p.gpu_total;
  j["gpu_total_bottom_bytes"] = p.gpu_total_bottom;
  j["tight"] = p.tight();
  j["band_unknowns"] = p.band_unknowns;
  j["gpu_capacity_bytes"] = p.gpu_capacity;
  j["gpu_budget_bytes"] = p.gpu_budget;
  j["gpu_margin_bytes"] = p.gpu_margin();
  j["peak_allocated_bytes"] = p.peak_allocated;
  j["peak_reserved_bytes"] = p.peak_reserved;
  j["simulated_peak_allocated_bytes"] = p.simulated_peak_allocated;
  j["simulated_peak_reserved_bytes"] = p.simulated_peak_reserved;
  j["simulated_out_of_memory"] = p.simulated_out_of_memory;
  j["breakdown"] = breakdown_to_json(p.peak);
  j["peak_at"] = {{"phase", p.where.phase}, {"block", p.where.block}, {"block_name", p.where.block_name}};
  j["host_ram_bytes"] = p.host_ram;
  j["host_ram_budget_bytes"] = p.host_ram_budget;
  j["disk_bytes"] = p.disk;
  j["disk_budget_bytes"] = p.disk_budget;
  j["checkpoint_bytes"] = p.checkpoint_bytes;
  const TimeBreakdown& t = p.time;
  j["time"] = {{"forward_ms", t.forward_ms},     {"backward_ms", t.backward_ms},
               {"recompute_ms", t.recompute_ms}, {"offload_exposed_ms", t.offload_exposed_ms},
               {"comm_exposed_ms", t.comm_exposed_ms}, {"optimizer_ms", t.optimizer_ms},
               {"step_ms", t.step_ms},           {"samples_per_s", t.samples_per_s},
               {"tokens_per_s", t.tokens_per_s}, {"mfu", t.mfu}};
  return j;
}

nlohmann::json plan_to_json(const Plan& plan) {
  nlohmann::json j;
  j["format"] = "headroom.plan";
  j["version"] = 1;
  j["model"] = plan.model;
  j["gpu"] = plan.gpu;
  j["seq_len"] = plan.seq_len;
  j["settings"] = settings_to_json(plan.settings);
  j["config"] = {{"zero_stage", plan.config.zero_stage},
                 {"offload_optimizer", offload_name(plan.config.offload_optimizer)},
                 {"offload_param", offload_name(plan.config.offload_param)},
                 {"micro_batch", plan.config.micro_batch},
                 {"grad_accum", plan.config.grad_accum}};
  nlohmann::json blocks = nlohmann::json::array();
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    blocks.push_back({{"name", b < plan.block_names.size() ? plan.block_names[b] : ""},
                      {"choice", block_choice_name(plan.blocks[b])}});
  }
  j["blocks"] = blocks;
  j["prediction"] = prediction_to_json(plan.prediction);
  return j;
}

Result<Plan> plan_from_json(const nlohmann::json& j, std::string_view origin) {
  const std::string where(origin);
  // Compared as JSON, so a value of another type is a mismatch rather than a type_error.
  if (!j.is_object() || !j.contains("format") || j.at("format") != "headroom.plan") {
    return Status::error(where + ": format: expected \"headroom.plan\"");
  }
  if (!j.contains("version") || j.at("version") != 1) return Status::error(where + ": version: expected 1");
  Plan plan;
  try {
    plan.model = j.at("model").get<std::string>();
    plan.gpu = j.at("gpu").get<std::string>();
    plan.seq_len = j.at("seq_len").get<int64_t>();
  } catch (const nlohmann::json::exception&) {
    return Status::error(where + ": model/gpu/seq_len: expected a string, a string and an integer");
  }
  if (!j.contains("settings")) return Status::error(where + ": settings: missing");
  Result<RunSettings> settings = settings_from_json(j.at("settings"), where);
  if (!settings.is_ok()) return settings.status();
  plan.settings = settings.value();
  if (!j.contains("config") || !j.at("config").is_object()) return Status::error(where + ": config: expected an object");
  const auto& c = j.at("config");
  try {
    plan.config.zero_stage = c.at("zero_stage").get<int>();
    plan.config.micro_batch = c.at("micro_batch").get<int64_t>();
    plan.config.grad_accum = c.at("grad_accum").get<int64_t>();
  } catch (const nlohmann::json::exception&) {
    return Status::error(where + ": config: expected integers zero_stage, micro_batch, grad_accum");
  }
  const auto offload_of = [&c](const char* key) -> std::optional<Offload> {
    if (!c.contains(key)) return Offload::kNone;
    if (!c.at(key).is_string()) return std::nullopt;
    return parse_offload(c.at(key).get<std::string>());
  };
  const auto optimizer = offload_of("offload_optimizer");
  const auto param = offload_of("offload_param");
  if (!optimizer || !param) return Status::error(where + ": config.offload_*: expected none, cpu or nvme");
  plan.config.offload_optimizer = *optimizer;
  plan.config.offload_param = *param;
  if (!j.contains("blocks") || !j.at("blocks").is_array()) return Status::error(where + ": blocks: expected an array");
  for (size_t b = 0; b < j.at("blocks").size(); ++b) {
    const auto& entry = j.at("blocks")[b];
    const std::string field = where + ": blocks[" + std::to_string(b) + "]";
    if (!entry.is_object() || !entry.contains("choice") || !entry.at("choice").is_string()) {
      return Status::error(field + ": expected {\"name\", \"choice\"}");
    }
    const std::string choice = entry.at("choice").get<std::string>();
    if (choice == "keep") plan.blocks.push_back(BlockChoice::kKeep);
    else if (choice == "checkpoint") plan.blocks.push_back(BlockChoice::kCheckpoint);
    else if (choice == "offload") plan.blocks.push_back(BlockChoice::kOffload);
    else return Status::error(field + ".choice: expected keep, checkpoint or offload, got \"" + choice + "\"");
    if (entry.contains("name") && !entry.at("name").is_string()) return Status::error(field + ".name: expected a string");
    plan.block_names.push_back(entry.contains("name") ? entry.at("name").get<std::string>() : "");
  }
  return plan;
}

}  // namespace headroom::planner
