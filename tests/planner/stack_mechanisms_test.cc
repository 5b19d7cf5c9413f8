// The table of stack mechanisms (planner/settings/stack_mechanisms.h): every row's
// setting goes through its flag text, the settings JSON and back unchanged, a
// value outside its choices is refused with them, and the band's bottom that the
// rows pin is a run validate_settings accepts, for every stack.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "planner/settings/settings_json.h"
#include "planner/settings/stack.h"
#include "planner/settings/stack_mechanisms.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {
namespace {

// A row's choices as they are typed ("chunked[:N]" stands for "chunked:4" here).
std::vector<std::string> choice_texts(const MechanismRow& row) {
  std::vector<std::string> out;
  const std::string all = row.choices();
  size_t start = 0;
  while (start < all.size()) {
    const size_t comma = all.find(", ", start);
    std::string name = all.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (const size_t bracket = name.find('['); bracket != std::string::npos) name = name.substr(0, bracket) + ":4";
    out.push_back(name);
    start = comma == std::string::npos ? all.size() : comma + 2;
  }
  return out;
}

// A run every mechanism is accepted for: LoRA under pure bf16, FSDP2 at ZeRO-3
// with accumulation, compiled, checkpointed.
RunSettings accepting_run() {
  RunSettings s;
  s.model = "tiny-llama";
  s.mode = TrainMode::kLora;
  s.precision = Precision::kBf16Pure;
  s.gpus_per_node = 2;
  s.zero_stage = 3;
  s.sharding = Sharding::kFsdp2;
  s.grad_accum = 2;
  s.compile = true;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  return s;
}

}  // namespace

TEST_CASE("every mechanism row has its own key and flag, and its choices go through flags and JSON unchanged") {
  std::set<std::string> keys;
  for (const MechanismRow& row : stack_mechanisms()) {
    CAPTURE(row.key);
    CHECK(keys.insert(row.key).second);
    CHECK(mechanism_flag(row).rfind("--", 0) == 0);
    CHECK(mechanism_flag(row).find('_') == std::string::npos);
    CHECK(mechanism_help(row).find("default: as the stack") != std::string::npos);
    const std::vector<std::string> choices = choice_texts(row);
    REQUIRE(choices.size() >= 2);
    for (const std::string& text : choices) {
      CAPTURE(text);
      RunSettings s;
      s.model = "tiny-llama";
      REQUIRE(row.set(row, s, text).is_ok());
      const nlohmann::json written = settings_to_json(s);
      REQUIRE(written.contains(row.key));
      // Read back with every other field: the same JSON again.
      const Result<RunSettings> read = settings_from_json(written, "test");
      if (!read.is_ok()) {
        // Some choices are refused alone (validate_settings); the row's reader still took them.
        CHECK(read.status().message().find(std::string("settings.") + row.key + ": expected") == std::string::npos);
        continue;
      }
      CHECK(settings_to_json(read.value()) == written);
    }
    RunSettings s;
    const Status bad = row.set(row, s, "no-such-choice");
    REQUIRE_FALSE(bad.is_ok());
    CHECK(bad.message().find(row.choices() == "on, off" ? "on or off" : row.choices()) != std::string::npos);
  }
}

TEST_CASE("the settings JSON refuses a bad mechanism value by its key, with the row's choices") {
  for (const MechanismRow& row : stack_mechanisms()) {
    CAPTURE(row.key);
    nlohmann::json j = {{"model", "tiny-llama"}, {row.key, 7}};
    const Result<RunSettings> read = settings_from_json(j, "f.json");
    REQUIRE_FALSE(read.is_ok());
    CHECK(read.status().message().find(std::string("f.json: settings.") + row.key + ": expected") !=
          std::string::npos);
  }
}

TEST_CASE("the band's bottom the rows pin is a valid run, for every stack and method") {
  int open_bands = 0;
  for (const std::string stack : {"unspecified", "hf-trainer", "torchtune", "litgpt", "torchtitan", "deepspeed",
                                  "torch-amp", "composer"}) {
    for (const TrainMode mode : {TrainMode::kFull, TrainMode::kLora, TrainMode::kQlora}) {
      for (const int zero : {0, 3}) {
        CAPTURE(stack);
        CAPTURE(static_cast<int>(mode));
        CAPTURE(zero);
        RunSettings s = accepting_run();
        s.stack = *parse_stack(stack);
        s.mode = mode;
        s.zero_stage = zero;
        if (zero == 0) s.sharding.reset();
        if (!validate_settings(s, "test").is_ok()) continue;  // a combination the stack refuses
        const std::optional<RunSettings> bottom = bottom_of_band(s);
        if (!bottom) continue;
        ++open_bands;
        CHECK(validate_settings(*bottom, "test").is_ok());
        // Pinned at the bottom, nothing the rows decide is open any more.
        CHECK(resolve_stack(*bottom).unknowns.empty());
      }
    }
  }
  CHECK(open_bands >= 20);
}

TEST_CASE("the fit report's words come from the rows, each only where it changes the run") {
  RunSettings s = accepting_run();
  s.stack = Stack::kTorchtitan;
  const ResolvedStack resolved = resolve_stack(s);
  std::vector<std::string> words;
  for (const MechanismRow& row : stack_mechanisms()) {
    if (std::string phrase = row.words(s, resolved); !phrase.empty()) words.push_back(phrase);
  }
  REQUIRE(words.size() == 6);
  CHECK(words[0] == "optimizer step fused to foreach");
  CHECK(words[2] == "checkpointed blocks recompute block to selective-op");
  CHECK(words[3] == "adapters fp32");
  CHECK(words[4] == "sharded by FSDP2 reducing every micro-step");
  CHECK(words[5] == "forward without autocast");
  s.mode = TrainMode::kFull;
  s.checkpointing = CheckpointPolicy::kNone;
  s.zero_stage = 0;
  s.sharding.reset();
  const ResolvedStack full = resolve_stack(s);
  for (const MechanismRow& row : stack_mechanisms()) {
    const std::string key = row.key;
    if (key == "adapter_dtype" || key == "fsdp_no_sync") CHECK(row.words(s, full).empty());
  }
}

}  // namespace headroom::planner
