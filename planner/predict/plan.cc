#include "planner/predict/plan.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "planner/settings/json_fields.h"
#include "planner/settings/settings_json.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {

int64_t MemoryBreakdown::total() const {
  return cuda_context + workspaces + parameters + gradients + optimizer_states + master_weights +
         zero_buffers + activations + transient + allocator + vllm;
}

nlohmann::json breakdown_to_json(const MemoryBreakdown& m) {
  return {
      {"cuda_context_bytes", m.cuda_context},   {"workspaces_bytes", m.workspaces},
      {"parameters_bytes", m.parameters},       {"buffers_bytes", m.buffers},
      {"saved_buffers_bytes", m.saved_buffers},
      {"gradients_bytes", m.gradients},
      {"optimizer_states_bytes", m.optimizer_states}, {"master_weights_bytes", m.master_weights},
      {"zero_buffers_bytes", m.zero_buffers},   {"activations_bytes", m.activations},
      {"transient_bytes", m.transient},         {"allocator_bytes", m.allocator},
      {"vllm_bytes", m.vllm},
      {"total_bytes", m.total()},               {"paged_optimizer_states_bytes", m.paged_optimizer_states},
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
  j["varied_length_micro_steps"] = p.varied_length_micro_steps;
  j["gpu_capacity_bytes"] = p.gpu_capacity;
  j["gpu_budget_bytes"] = p.gpu_budget;
  j["gpu_margin_bytes"] = p.gpu_margin();
  j["peak_allocated_bytes"] = p.peak_allocated;
  j["peak_reserved_bytes"] = p.peak_reserved;
  j["simulated_peak_allocated_bytes"] = p.simulated_peak_allocated;
  j["simulated_peak_live_bytes"] = p.simulated_peak_live;
  j["simulated_peak_reserved_bytes"] = p.simulated_peak_reserved;
  j["simulated_out_of_memory"] = p.simulated_out_of_memory;
  j["model"] = {{"total_parameters", p.model.total_params},
                {"trainable_parameters", p.model.trainable_params},
                {"weight_bytes_by_dtype", p.model.weight_bytes_by_dtype}};
  if (p.model.image_tokens > 0) j["model"]["image_tokens"] = p.model.image_tokens;
  if (p.model.target_tokens > 0) j["model"]["target_tokens"] = p.model.target_tokens;
  j["breakdown"] = breakdown_to_json(p.peak);
  j["allocated_breakdown"] = breakdown_to_json(p.peak_as_allocated);
  const MeasurableMemory& a = p.allocated;
  j["allocated"] = {{"parameters_bytes", a.parameters},
                    {"optimizer_states_bytes", a.optimizer_states},
                    {"master_weights_bytes", a.master_weights},
                    {"gradients_bytes", a.gradients},
                    {"activations_bytes", a.activations},
                    {"offloaded_activations_bytes", a.offloaded_activations}};
  j["peak_at"] = {{"phase", p.where.phase}, {"block", p.where.block}, {"block_name", p.where.block_name}};
  j["host_ram_bytes"] = p.host_ram;
  j["host_ram_budget_bytes"] = p.host_ram_budget;
  j["host_ram_budget_assumed"] = p.host_ram_assumed;
  j["disk_budget_assumed"] = p.disk_assumed;
  j["disk_bytes"] = p.disk;
  j["disk_budget_bytes"] = p.disk_budget;
  j["checkpoint_bytes"] = p.checkpoint_bytes;
  const TimeBreakdown& t = p.time;
  j["time"] = {{"forward_ms", t.forward_ms},     {"backward_ms", t.backward_ms},
               {"recompute_ms", t.recompute_ms}, {"offload_exposed_ms", t.offload_exposed_ms},
               {"comm_exposed_ms", t.comm_exposed_ms}, {"optimizer_ms", t.optimizer_ms},
               {"paged_migration_ms", t.paged_migration_ms},
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

namespace {

Status missing(const std::string& where, const char* field, const char* what) {
  return Status::invalid_input(where + ": " + field + ": missing (expected " + what + ")");
}

// The plan's globals, strictly, then held to the ranges every setting is held
// to: the config is applied to the plan's settings and the result validated
// like any settings (planner/settings/run_settings.h), so simulate, report and run
// refuse a micro_batch of -4 or a zero_stage of 7 with the same message.
Result<GlobalConfig> config_from_json(const nlohmann::json& c, const RunSettings& settings, const std::string& where) {
  if (!c.is_object()) return Status::invalid_input(where + ": config: expected an object");
  GlobalConfig config;
  JsonFields r(c, where, "config.");
  for (const Status& status :
       {r.read("zero_stage", config.zero_stage),
        r.read_enum("offload_optimizer", config.offload_optimizer, parse_offload, offload_names()),
        r.read_enum("offload_param", config.offload_param, parse_offload, offload_names()),
        r.read("micro_batch", config.micro_batch), r.read("grad_accum", config.grad_accum), r.unknown_keys()}) {
    if (!status.is_ok()) return status;
  }
  for (const char* key : {"zero_stage", "micro_batch", "grad_accum"}) {
    if (!c.contains(key)) return missing(where, (std::string("config.") + key).c_str(), "an integer");
  }
  RunSettings applied = settings;
  applied.zero_stage = config.zero_stage;
  applied.offload_optimizer = config.offload_optimizer;
  applied.offload_param = config.offload_param;
  applied.micro_batch = config.micro_batch;
  applied.grad_accum = config.grad_accum;
  applied.global_batch = 0;
  if (Status valid = validate_settings(applied, where + ": config"); !valid.is_ok()) return valid;
  return config;
}

}  // namespace

Result<Plan> plan_from_json(const nlohmann::json& j, std::string_view origin) {
  const std::string where(origin);
  // Compared as JSON, so a value of another type is a mismatch rather than a type_error.
  if (!j.is_object() || !j.contains("format") || j.at("format") != "headroom.plan") {
    return Status::invalid_input(where + ": format: expected \"headroom.plan\"");
  }
  if (!j.contains("version") || j.at("version") != 1)
    return Status::invalid_input(where + ": version: expected 1");
  Plan plan;
  JsonFields r(j, where, "");
  std::string format;
  int64_t version = 0;
  for (const Status& status : {r.read("format", format), r.read("version", version), r.read("model", plan.model),
                               r.read("gpu", plan.gpu), r.read("seq_len", plan.seq_len)}) {
    if (!status.is_ok()) return status;
  }
  const nlohmann::json* settings = r.member("settings");
  const nlohmann::json* config = r.member("config");
  const nlohmann::json* blocks = r.member("blocks");
  const nlohmann::json* prediction = r.member("prediction");  // recomputed on load; kept for readers of the file
  if (Status unknown = r.unknown_keys(); !unknown.is_ok()) return unknown;
  if (!j.contains("model")) return missing(where, "model", "a string");
  if (!j.contains("gpu")) return missing(where, "gpu", "a string");
  if (!j.contains("seq_len")) return missing(where, "seq_len", "an integer");
  if (plan.seq_len < 1 || plan.seq_len > kMaxSeqLen) {
    return Status::invalid_input(where + ": seq_len: expected an integer from 1 to " +
                                 std::to_string(kMaxSeqLen) + ", got " +
                                 std::to_string(plan.seq_len));
  }
  if (settings == nullptr) return missing(where, "settings", "the run's settings");
  Result<RunSettings> read_settings = settings_from_json(*settings, where);
  if (!read_settings.is_ok()) return read_settings.status();
  plan.settings = read_settings.value();
  if (config == nullptr) return missing(where, "config", "an object");
  Result<GlobalConfig> read_config = config_from_json(*config, plan.settings, where);
  if (!read_config.is_ok()) return read_config.status();
  plan.config = read_config.value();
  if (prediction != nullptr && !prediction->is_object())
    return Status::invalid_input(where + ": prediction: expected an object");
  if (blocks == nullptr || !blocks->is_array())
    return Status::invalid_input(where + ": blocks: expected an array");
  for (size_t b = 0; b < blocks->size(); ++b) {
    const auto& entry = (*blocks)[b];
    const std::string field = "blocks[" + std::to_string(b) + "]";
    if (!entry.is_object())
      return Status::invalid_input(where + ": " + field + ": expected {\"name\", \"choice\"}");
    std::string name;
    BlockChoice choice = BlockChoice::kKeep;
    JsonFields e(entry, where, field + ".");
    for (const Status& status : {e.read("name", name), e.read_enum("choice", choice, parse_block_choice,
                                                                    "keep, checkpoint, offload"),
                                 e.unknown_keys()}) {
      if (!status.is_ok()) return status;
    }
    if (!entry.contains("choice")) return missing(where, (field + ".choice").c_str(), "keep, checkpoint or offload");
    plan.blocks.push_back(choice);
    plan.block_names.push_back(name);
  }
  return plan;
}

}  // namespace headroom::planner
