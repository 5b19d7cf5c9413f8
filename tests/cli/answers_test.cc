// cli/answers.h: the fit and plan answers the command line and the Python
// package share. Settings given as text read as the same file does, flags given
// by name as on the command line, and refusals keep the command line's exit
// status (tests/python/test_api.py compares the two front ends end to end).
#include "cli/answers.h"

#include <doctest/doctest.h>

#include <string>

#include "cli/commands.h"
#include "tests/cli/cli_harness.h"

namespace {

using headroom::cli::Answered;
using headroom::cli::answer_fit;
using headroom::cli::answer_plan;
using headroom::cli::FitOutcome;
using headroom::cli::fit_document;
using headroom::cli::give_flag;
using headroom::cli::plan_document;
using headroom::cli::SettingsFlags;
using namespace headroom::cli_harness;  // NOLINT(google-build-using-namespace): test helpers

constexpr const char* kSettings = R"({"model": "tiny-llama", "gpu": "a6000", "micro_batch": 2})";

TEST_CASE("settings given as text answer as the same settings file does") {
  TempDir dir;
  SettingsFlags by_file;
  by_file.settings_file = dir.file("settings.json");
  write_text(by_file.settings_file, kSettings);
  SettingsFlags by_text;
  by_text.settings_text = kSettings;
  const Answered<FitOutcome> from_file = answer_fit("", by_file);
  const Answered<FitOutcome> from_text = answer_fit("", by_text);
  REQUIRE(from_file.is_ok());
  REQUIRE(from_text.is_ok());
  CHECK(fit_document(*from_text.value) == fit_document(*from_file.value));
  CHECK(fit_document(*from_text.value)["as_given"]["settings"]["micro_batch"] == 2);
}

TEST_CASE("a misspelt key in settings text is a usage refusal naming the key and the origin") {
  SettingsFlags flags;
  flags.settings_text = R"({"model": "tiny-llama", "micro_bach": 2})";
  flags.settings_origin = "the settings dict";
  const Answered<FitOutcome> answered = answer_fit("", flags);
  REQUIRE_FALSE(answered.is_ok());
  CHECK(answered.status.code() == headroom::StatusCode::kInvalidInput);
  CHECK(headroom::cli::exit_status(answered.status) == headroom::cli::kExitUsage);
  CHECK(contains(
      answered.status.message(),
      "the settings dict: settings.micro_bach: unknown key (did you mean \"micro_batch\"?"));
}

TEST_CASE("an unknown GPU is the planner's refusal, exit status 1") {
  SettingsFlags flags;
  flags.settings_text = R"({"model": "tiny-llama", "gpu": "nope"})";
  const Answered<FitOutcome> answered = answer_fit("", flags);
  REQUIRE_FALSE(answered.is_ok());
  CHECK(answered.status.code() == headroom::StatusCode::kUnsupported);
  CHECK(headroom::cli::exit_status(answered.status) == headroom::cli::kExitFailure);
  CHECK(contains(answered.status.message(), "unknown GPU 'nope'"));
}

TEST_CASE("flags given by any spelling apply as on the command line") {
  SettingsFlags flags;
  REQUIRE(give_flag(flags, "--gpu", "a6000").is_ok());
  REQUIRE(give_flag(flags, "--micro-batch", "4").is_ok());  // the second spelling of --batch
  REQUIRE(give_flag(flags, "--lora", "").is_ok());
  const Answered<FitOutcome> answered = answer_fit("tiny-llama", flags);
  REQUIRE(answered.is_ok());
  CHECK(answered->answer.as_given.settings.micro_batch == 4);
  CHECK(fit_document(*answered.value)["as_given"]["settings"]["mode"] == "lora");
}

TEST_CASE("unknown flags and values on switches are refused, naming the flag") {
  SettingsFlags flags;
  const headroom::Status unknown = give_flag(flags, "--micro-bach", "2");
  CHECK_FALSE(unknown.is_ok());
  CHECK(contains(unknown.message(), "--micro-bach: unknown settings flag"));
  const headroom::Status valued = give_flag(flags, "--lora", "yes");
  CHECK_FALSE(valued.is_ok());
  CHECK(contains(valued.message(), "--lora: a switch takes no value"));
  CHECK(flags.given.empty());
}

TEST_CASE("the plan document names -o only when a plan was found") {
  SettingsFlags flags;
  flags.settings_text = kSettings;
  const auto answered = answer_plan("", flags);
  REQUIRE(answered.is_ok());
  REQUIRE(answered->result.found);
  CHECK(plan_document(*answered.value, "")["output_file"].is_null());
  CHECK(plan_document(*answered.value, "p.json")["output_file"] == "p.json");
  CHECK(plan_document(*answered.value, "")["command"] == "plan");
}

}  // namespace
