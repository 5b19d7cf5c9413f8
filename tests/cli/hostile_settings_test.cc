// Issue 14 end to end: settings and plans that describe an impossible run are
// refused whichever way they arrive, with one message naming the file and the
// field and a non-zero exit; never "FITS".
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/cli/cli_harness.h"

namespace {

using namespace headroom::cli_harness;  // NOLINT(google-build-using-namespace): test helpers

TEST_CASE("an impossible micro-batch is refused through --settings, --deepspeed and the flag alike") {
  TempDir dir;
  const std::string settings = dir.file("settings.json");
  write_text(settings, R"({"model":"llama-3-8b","gpu":"h100","mode":"lora","micro_batch":10000000000000})");
  const RunOutput by_file = run_headroom("fit --settings " + quoted(settings));
  CHECK(by_file.exit_code == 2);
  CHECK(contains(by_file.err, settings + ": micro_batch: expected an integer from 1 to 1024, got 10000000000000"));
  CHECK_FALSE(contains(by_file.out, "FITS"));

  const std::string deepspeed = dir.file("ds.json");
  write_text(deepspeed, R"({"train_micro_batch_size_per_gpu": 10000000000000})");
  const RunOutput by_deepspeed = run_headroom("fit llama-3-8b --gpu h100 --lora --deepspeed " + quoted(deepspeed));
  CHECK(by_deepspeed.exit_code == 2);
  CHECK(contains(by_deepspeed.err, deepspeed + ": micro_batch: expected an integer from 1 to 1024"));

  const RunOutput by_flag = run_headroom("fit llama-3-8b --gpu h100 --lora --batch 10000000000000");
  CHECK(by_flag.exit_code == 2);
  CHECK(contains(by_flag.err, "--batch: expected an integer from 1 to 1024"));
}

TEST_CASE("a settings file with a duplicate or misspelt key is refused, naming it") {
  TempDir dir;
  const std::string settings = dir.file("settings.json");
  write_text(settings, R"({"model": "gpt2", "micro_batch": 2, "micro_batch": 8})");
  const RunOutput duplicate = run_headroom("fit --settings " + quoted(settings));
  CHECK(duplicate.exit_code == 2);
  CHECK(contains(duplicate.err, settings + ": micro_batch: duplicate key"));
  write_text(settings, R"({"model": "gpt2", "micro_bach": 64})");
  const RunOutput typo = run_headroom("fit --settings " + quoted(settings));
  CHECK(typo.exit_code == 2);
  CHECK(contains(typo.err, settings + ": settings.micro_bach: unknown key (did you mean \"micro_batch\"?"));
}

TEST_CASE("simulate, report and run refuse a bad plan identically") {
  TempDir dir;
  const std::string plan = dir.file("plan.json");
  REQUIRE(run_headroom("fit tiny-llama --gpu a6000 -o " + quoted(plan)).exit_code == 0);
  nlohmann::json edited = parse_json(read_text(plan));
  edited["config"]["micro_batch"] = -4;
  write_text(plan, edited.dump());
  const std::string expected = "headroom: PLAN: " + plan +
                               ": config: micro_batch: expected an integer from 1 to 1024, got -4\n";
  for (const std::string& command : {"simulate " + quoted(plan), "report " + quoted(plan) + " -o " +
                                        quoted(dir.file("r.html")),
                                    "run " + quoted(plan) + " --steps 1 --device cpu"}) {
    CAPTURE(command);
    const RunOutput run = run_headroom(command);
    if (contains(run.err, "built without LibTorch")) continue;  // run needs the trainer
    CHECK(run.exit_code == 2);
    CHECK(run.err == expected);
    CHECK(run.out.empty());
  }
}

// The three commands that read a plan, each refusing `plan` (a run needs no
// trainer to refuse it: the plan is read before the trainer is looked for).
std::vector<RunOutput> read_plan_three_ways(const std::string& plan, const TempDir& dir) {
  std::vector<RunOutput> outputs;
  for (const std::string& command :
       {"simulate " + quoted(plan), "report " + quoted(plan) + " -o " + quoted(dir.file("r.html")),
        "run " + quoted(plan) + " --steps 1 --device cpu"}) {
    outputs.push_back(run_headroom(command));
  }
  return outputs;
}

TEST_CASE(
    "a plan that reads but does not match its model: status 2 and one message from simulate, "
    "report and run") {
  TempDir dir;
  const std::string plan = dir.file("plan.json");
  REQUIRE(run_headroom("fit tiny-llama --gpu a6000 -o " + quoted(plan)).exit_code == 0);
  nlohmann::json edited = parse_json(read_text(plan));
  const size_t blocks = edited["blocks"].size();
  REQUIRE(blocks > 1);
  edited["blocks"].erase(edited["blocks"].size() - 1);
  write_text(plan, edited.dump());
  const std::string expected = "headroom: PLAN: " + plan + ": blocks: expected " +
                               std::to_string(blocks) + " entries for tiny-llama, got " +
                               std::to_string(blocks - 1) + "\n";
  const std::vector<RunOutput> outputs = read_plan_three_ways(plan, dir);
  for (size_t i = 0; i < outputs.size(); ++i) {
    CAPTURE(i);                        // simulate, report, run
    CHECK(outputs[i].exit_code == 2);  // the user's file is wrong
    CHECK(outputs[i].err == expected);
    CHECK(outputs[i].out.empty());
  }
}

TEST_CASE(
    "a plan for a model headroom does not know: status 1 and one message from simulate, report and "
    "run") {
  TempDir dir;
  const std::string plan = dir.file("plan.json");
  REQUIRE(run_headroom("fit tiny-llama --gpu a6000 -o " + quoted(plan)).exit_code == 0);
  nlohmann::json edited = parse_json(read_text(plan));
  edited["model"] = "no-such-model";
  edited["settings"]["model"] = "no-such-model";
  write_text(plan, edited.dump());
  const std::string prefix =
      "headroom: PLAN: " + plan + ": unknown model 'no-such-model' (expected one of: ";
  const std::vector<RunOutput> outputs = read_plan_three_ways(plan, dir);
  for (size_t i = 0; i < outputs.size(); ++i) {
    CAPTURE(i);                        // simulate, report, run
    CHECK(outputs[i].exit_code == 1);  // well-formed, but headroom cannot plan it
    CHECK(outputs[i].err.rfind(prefix, 0) == 0);
    CHECK(outputs[i].err == outputs[0].err);
    CHECK(outputs[i].out.empty());
  }
}

}  // namespace
