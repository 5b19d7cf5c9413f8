#include "planner/predict/plan_file.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "graph/atomic_file.h"
#include "graph/graph_json.h"
#include "planner/predict/prediction.h"

namespace headroom::planner {

Result<Plan> load_plan_file(const std::string& path) {
  Result<std::string> text = graph::read_file(path, kMaxPlanFileBytes);
  if (!text.is_ok()) return text.status();
  Result<nlohmann::json> json = graph::parse_json_text(text.value(), path);
  if (!json.is_ok()) return json.status();
  return plan_from_json(json.value(), path);
}

Result<PreparedPlan> prepare_plan(Plan plan, const std::string& origin) {
  Result<ModelContext> context = prepare_context(plan.settings);
  if (!context.is_ok()) return context.status().with_prefix(origin + ": ");
  if (Status values = check_batch_norm_values(context.value(), plan.config.micro_batch); !values.is_ok()) {
    return values.with_prefix(origin + ": ");
  }
  PreparedPlan out{std::move(plan), std::move(context.value())};
  if (out.plan.blocks.size() != out.context.graph.blocks.size()) {
    return Status::invalid_input(origin + ": blocks: expected " +
                                 std::to_string(out.context.graph.blocks.size()) + " entries for " +
                                 out.context.graph.name + ", got " +
                                 std::to_string(out.plan.blocks.size()));
  }
  out.plan.prediction = with_band(out.context, out.plan.settings, out.plan.config, out.plan.blocks,
                                  predict(out.context, out.plan.settings, out.plan.config, out.plan.blocks));
  return out;
}

Result<PreparedPlan> load_prepared_plan(const std::string& path) {
  Result<Plan> plan = load_plan_file(path);
  if (!plan.is_ok()) return plan.status();
  return prepare_plan(std::move(plan.value()), path);
}

}  // namespace headroom::planner
