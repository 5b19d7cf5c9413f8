#include "executor/run_state.h"

#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "graph/json_text.h"

namespace headroom::executor {
namespace {

using nlohmann::json;

// A checkpoint's run.json is a few hundred bytes; far larger is not one.
constexpr size_t kMaxRunStateBytes = size_t{1} << 20;

Status bad(const std::string& origin, const std::string& field, const std::string& expected, const json& got) {
  std::string shown = got.dump(-1, ' ', true, json::error_handler_t::replace);
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  return Status::invalid_input(origin + ": " + field + ": expected " + expected + ", got " + shown);
}

std::optional<int64_t> as_int64(const json& value) {
  if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(value.get<uint64_t>());
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  return std::nullopt;
}

}  // namespace

json run_identity(const planner::Plan& plan, const RunOptions& options, const std::string& parameters) {
  return {{"model", plan.settings.model},
          {"precision", planner::precision_name(plan.settings.precision)},
          {"mode", planner::mode_name(plan.settings.mode)},
          {"lora_rank", plan.settings.lora.rank},
          {"micro_batch", plan.config.micro_batch},
          // Samples per optimizer step over every rank: the data a step reads, the
          // same whether one process accumulates them or several ranks share them.
          {"samples_per_step", plan.config.micro_batch * plan.config.grad_accum * plan.settings.world_size()},
          {"seq_len", plan.seq_len},
          {"lora_dropout", plan.settings.lora.dropout},
          {"offload_optimizer", planner::offload_name(plan.config.offload_optimizer)},
          {"learning_rate", options.learning_rate},
          {"weight_decay", options.weight_decay},
          {"seed", options.seed},
          {"data", options.data},
          {"token_bytes", options.token_bytes},
          {"parameters", parameters}};
}

std::string run_state_text(const RunState& state) {
  const json run = {{"format", kRunStateFormat},
                    {"version", kRunStateVersion},
                    {"step", state.step},
                    {"identity", state.identity},
                    {"loss_scale", state.loss_scale},
                    {"clean_steps", state.clean_steps}};
  return run.dump(2) + "\n";
}

Result<RunState> parse_run_state(std::string_view text, const std::string& origin, int64_t expected_step) {
  if (text.size() > kMaxRunStateBytes) {
    return Status::invalid_input(origin + ": " + std::to_string(text.size()) +
                                 " bytes (expected a run state of at most " +
                                 std::to_string(kMaxRunStateBytes) + ")");
  }
  Result<json> parsed = graph::parse_json_text(text, origin);
  if (!parsed.is_ok()) return parsed.status();
  const json& run = parsed.value();
  if (!run.is_object()) return bad(origin, "(top level)", "a headroom run state object", run);
  const std::set<std::string> keys = {"format", "version", "step", "identity", "loss_scale", "clean_steps"};
  for (const auto& item : run.items()) {
    if (keys.count(item.key()) == 0) {
      return Status::invalid_input(origin + ": " + item.key() +
                                   ": unknown key (expected only format, version, step, "
                                   "identity, loss_scale, clean_steps)");
    }
  }
  for (const std::string& key : keys) {
    if (!run.contains(key)) return Status::invalid_input(origin + ": " + key + ": missing");
  }
  if (!run.at("format").is_string() || run.at("format").get<std::string>() != kRunStateFormat) {
    return bad(origin, "format", "\"" + std::string(kRunStateFormat) + "\"", run.at("format"));
  }
  if (as_int64(run.at("version")) != kRunStateVersion) {
    return bad(origin, "version", std::to_string(kRunStateVersion) + " (the version this build reads)",
               run.at("version"));
  }
  RunState state;
  const std::optional<int64_t> step = as_int64(run.at("step"));
  if (step != expected_step) {
    return bad(origin, "step", std::to_string(expected_step) + ", the step of the checkpoint that holds it",
               run.at("step"));
  }
  state.step = *step;
  if (!run.at("identity").is_object()) return bad(origin, "identity", "an object", run.at("identity"));
  state.identity = run.at("identity");
  const json& scale = run.at("loss_scale");
  if (!scale.is_number() || !std::isfinite(scale.get<double>()) || scale.get<double>() <= 0) {
    return bad(origin, "loss_scale", "a positive number", scale);
  }
  state.loss_scale = scale.get<double>();
  const std::optional<int64_t> clean = as_int64(run.at("clean_steps"));
  if (!clean || *clean < 0) return bad(origin, "clean_steps", "an integer >= 0", run.at("clean_steps"));
  state.clean_steps = *clean;
  return state;
}

Status check_identity(const json& saved_as_written, const json& current, const std::string& origin) {
  // Checkpoints from before several ranks name grad_accum: one process, so
  // their samples per step are micro_batch x grad_accum.
  json saved = saved_as_written;
  if (saved.is_object() && saved.contains("grad_accum") && !saved.contains("samples_per_step") &&
      saved.contains("micro_batch") && saved["grad_accum"].is_number_integer() &&
      saved["micro_batch"].is_number_integer()) {
    saved["samples_per_step"] = saved["micro_batch"].get<int64_t>() * saved["grad_accum"].get<int64_t>();
    saved.erase("grad_accum");
  }
  if (saved == current) return Status::ok();
  std::string differences;
  auto shown = [](const json* value) {
    return value == nullptr ? std::string("(absent)") : value->dump(-1, ' ', true, json::error_handler_t::replace);
  };
  std::set<std::string> keys;
  for (const auto& item : saved.items()) keys.insert(item.key());
  for (const auto& item : current.items()) keys.insert(item.key());
  for (const std::string& key : keys) {
    const json* was = saved.contains(key) ? &saved.at(key) : nullptr;
    const json* now = current.contains(key) ? &current.at(key) : nullptr;
    if (was != nullptr && now != nullptr && *was == *now) continue;
    differences += (differences.empty() ? "" : "; ") + key + " " + shown(was) + " in the checkpoint, " + shown(now) +
                   " in this run";
  }
  return Status::invalid_input(origin + ": identity: written by another run (" + differences +
                               "); expected a checkpoint of this plan, model and options");
}

}  // namespace headroom::executor
