// Plan files as every command reads them (planner/plan_file.h): wrong types,
// out-of-range and coerced values, unknown and duplicate keys are refused with
// one message naming the file and the field, never an internal error (issue 14).
#include "planner/plan_file.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "planner/planner.h"

namespace headroom::planner {
namespace {

using nlohmann::json;

// A valid plan file's JSON, as `headroom fit -o` writes it.
json good_plan() {
  RunSettings settings;
  settings.model = "tiny-llama";
  settings.gpu = "a6000";
  Result<FitAnswer> answer = fit(settings);
  REQUIRE(answer.is_ok());
  return plan_to_json(answer->as_given);
}

std::string refusal(const json& plan) {
  const Result<Plan> read = plan_from_json(plan, "plan.json");
  return read.is_ok() ? "" : read.message();
}

}  // namespace

TEST_CASE("a plan file reads back") {
  const Result<Plan> read = plan_from_json(good_plan(), "plan.json");
  REQUIRE_MESSAGE(read.is_ok(), read.message());
  CHECK(read->settings.model == "tiny-llama");
}

TEST_CASE("wrong JSON types are messages naming the field, not type_error.302 (issue 14)") {
  json plan = good_plan();
  plan["format"] = 1;
  CHECK(refusal(plan).find("plan.json: format: expected") == 0);
  plan = good_plan();
  plan["version"] = "1";
  CHECK(refusal(plan).find("plan.json: version: expected 1") == 0);
  plan = good_plan();
  plan["config"]["offload_optimizer"] = 3;
  CHECK(refusal(plan).find("plan.json: config.offload_") == 0);
  plan = good_plan();
  plan["blocks"][0]["name"] = 7;
  CHECK(refusal(plan).find("plan.json: blocks[0].name: expected a string") == 0);
}

}  // namespace headroom::planner
