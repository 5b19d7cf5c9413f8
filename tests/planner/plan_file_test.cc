// Plan files as every command reads them (planner/predict/plan_file.h): wrong types,
// out-of-range and coerced values, unknown and duplicate keys are refused with
// one message naming the file and the field, never an internal error (issue 14).
#include "planner/predict/plan_file.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "planner/predict/planner.h"

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

TEST_CASE("impossible globals are refused by the settings' validation (issue 14: micro_batch -4 answered FITS)") {
  struct Case {
    const char* key;
    json value;
    const char* message;
  };
  const Case cases[] = {
      {"micro_batch", -4, "plan.json: config: micro_batch: expected an integer from 1 to 1024, got -4"},
      {"micro_batch", 0, "plan.json: config: micro_batch: expected an integer from 1 to 1024, got 0"},
      {"grad_accum", 0, "plan.json: config: grad_accum: expected an integer from 1 to 1000000, got 0"},
      {"zero_stage", -1, "plan.json: config: zero_stage: expected an integer from 0 to 3, got -1"},
      {"zero_stage", 7, "plan.json: config: zero_stage: expected an integer from 0 to 3, got 7"},
      {"micro_batch", 1.9, "plan.json: config.micro_batch: expected an integer (at most 2^63 - 1), got 1.9"},
      {"zero_stage", true, "plan.json: config.zero_stage: expected an integer (at most 2^63 - 1), got true"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.key);
    json plan = good_plan();
    plan["config"][c.key] = c.value;
    CHECK(refusal(plan) == c.message);
  }
  json plan = good_plan();
  plan["settings"]["zero_stage"] = 9;
  CHECK(refusal(plan) == "plan.json: zero_stage: expected an integer from 0 to 3, got 9");
  plan = good_plan();
  plan["seq_len"] = json::parse("9223372036854775808");
  CHECK(refusal(plan).find("plan.json: seq_len: expected an integer") == 0);
  plan = good_plan();
  plan["seq_len"] = 0;
  CHECK(refusal(plan) == "plan.json: seq_len: expected an integer from 1 to 16000000, got 0");
}

TEST_CASE("unknown and missing keys in a plan file are named") {
  json plan = good_plan();
  plan["config"]["micro_bach"] = 64;
  CHECK(refusal(plan).find("plan.json: config.micro_bach: unknown key (did you mean \"micro_batch\"?") == 0);
  plan = good_plan();
  plan["blocks"][1]["choise"] = "keep";
  CHECK(refusal(plan).find("plan.json: blocks[1].choise: unknown key") == 0);
  plan = good_plan();
  plan["extra"] = 1;
  CHECK(refusal(plan).find("plan.json: extra: unknown key") == 0);
  plan = good_plan();
  plan["settings"]["micro_bach"] = 64;
  CHECK(refusal(plan).find("plan.json: settings.micro_bach: unknown key") == 0);
  plan = good_plan();
  plan["config"].erase("grad_accum");
  CHECK(refusal(plan) == "plan.json: config.grad_accum: missing (expected an integer)");
  plan = good_plan();
  plan["blocks"][0].erase("choice");
  CHECK(refusal(plan) == "plan.json: blocks[0].choice: missing (expected keep, checkpoint or offload)");
}

}  // namespace headroom::planner
