// --recipe dpo and --reference: TRL's DPOTrainer from the command line and from a
// DPOConfig (--hf-args) to the stack line and the settings; RLOO and unknown recipes
// refused by name; `run` refuses a DPO plan (docs/stacks.md, "Recipes").
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_harness.h"

namespace headroom {
namespace {

using namespace cli_harness;

const std::string kLora = "fit tiny-llama --gpu 4090 --lora --precision bf16 --stack hf-trainer --seq 128";

// A file in `dir` holding `text`.
std::string written(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.file(name);
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("--recipe dpo names the recipe and the reference's treatment in the stack line") {
  const RunOutput base = run_headroom(kLora + " --recipe dpo");
  REQUIRE_MESSAGE(base.exit_code == 0, base.err);
  CHECK(contains(base.out, "DPO (chosen and rejected rows in one batch), reference the base with adapters disabled "
                           "(no second copy)"));
  const RunOutput full = run_headroom("fit tiny-llama --gpu 4090 --precision bf16 --stack hf-trainer --seq 128 "
                                      "--recipe dpo");
  REQUIRE_MESSAGE(full.exit_code == 0, full.err);
  CHECK(contains(full.out, "reference a frozen copy of the model"));

  const RunOutput pinned = run_headroom(kLora + " --recipe dpo --reference precomputed --json");
  REQUIRE_MESSAGE(pinned.exit_code == 0, pinned.err);
  const nlohmann::json settings = parse_json(pinned.out)["as_given"]["settings"];
  CHECK(settings["recipe"] == "dpo");
  CHECK(settings["reference"] == "precomputed");

  const RunOutput plain = run_headroom(kLora);
  REQUIRE(plain.exit_code == 0);
  CHECK_FALSE(contains(plain.out, "DPO"));
}

TEST_CASE("--recipe and --reference refuse what is not modelled, naming the flag or field") {
  const RunOutput ppo = run_headroom(kLora + " --recipe ppo");
  CHECK(ppo.exit_code == 2);
  CHECK(contains(ppo.err, "--recipe"));
  CHECK(contains(ppo.err, "supervised, dpo, reward, grpo"));

  const RunOutput copy = run_headroom(kLora + " --recipe dpo --reference copy");
  CHECK(copy.exit_code == 2);
  CHECK(contains(copy.err, "reference: a second model beside a LoRA policy"));

  const RunOutput alone = run_headroom(kLora + " --reference precomputed");
  CHECK(alone.exit_code == 2);
  CHECK(contains(alone.err, "expected recipe dpo"));
}

TEST_CASE("--hf-args reads a DPOConfig and a RewardConfig, and refuses RLOOConfig and unmodelled DPO fields") {
  TempDir dir;
  const std::string dpo = written(dir, "dpo.json",
                                  R"({"per_device_train_batch_size": 2, "max_length": 128, "bf16": true,
                                      "beta": 0.1, "loss_type": ["sigmoid"], "precompute_ref_log_probs": true})");
  const RunOutput read = run_headroom("fit tiny-llama --lora --gpu 4090 --hf-args " + quoted(dpo) + " --json");
  REQUIRE_MESSAGE(read.exit_code == 0, read.err);
  const nlohmann::json settings = parse_json(read.out)["as_given"]["settings"];
  CHECK(settings["recipe"] == "dpo");
  CHECK(settings["reference"] == "precomputed");
  CHECK_FALSE(contains(read.err, "beta"));  // read: it changes no memory

  // RLOOConfig shares num_generations with GRPOConfig, not importance_sampling_level.
  const std::string rloo = written(dir, "rloo.json", R"({"per_device_train_batch_size": 2, "num_generations": 8})");
  const RunOutput online = run_headroom("fit tiny-llama --lora --gpu 4090 --seq 128 --hf-args " + quoted(rloo));
  CHECK(online.exit_code == 2);
  CHECK(contains(online.err, "num_generations"));
  CHECK(contains(online.err, "RLOO"));

  const std::string reward = written(dir, "reward.json", R"({"center_rewards_coefficient": null, "max_length": 128})");
  const RunOutput scores = run_headroom("fit tiny-llama --lora --gpu 4090 --hf-args " + quoted(reward) + " --json");
  REQUIRE_MESSAGE(scores.exit_code == 0, scores.err);
  CHECK(parse_json(scores.out)["as_given"]["settings"]["recipe"] == "reward");
  const std::string dropout = written(dir, "dropout.json", R"({"center_rewards_coefficient": 0.01, "disable_dropout": false})");
  const RunOutput kept = run_headroom("fit tiny-llama --lora --gpu 4090 --seq 128 --hf-args " + quoted(dropout));
  CHECK(kept.exit_code == 2);
  CHECK(contains(kept.err, "disable_dropout"));

  const std::string packed = written(dir, "packed.json", R"({"f_divergence_type": "reverse_kl", "padding_free": true, "max_length": 128})");
  const RunOutput free = run_headroom("fit tiny-llama --lora --gpu 4090 --hf-args " + quoted(packed));
  CHECK(free.exit_code == 2);
  CHECK(contains(free.err, "padding_free"));
}

TEST_CASE("run refuses a DPO plan by its recipe, simulate replays its reference") {
  TempDir dir;
  const std::string plan = dir.file("dpo-plan.json");
  const RunOutput fit = run_headroom(kLora + " --recipe dpo -o " + quoted(plan));
  REQUIRE_MESSAGE(fit.exit_code == 0, fit.err);
  const RunOutput run = run_headroom("run " + quoted(plan) + " --steps 1 --device cpu --json");
  CHECK(run.exit_code == 1);
  CHECK(contains(run.err, "settings.recipe"));
  CHECK(contains(run.err, "dpo"));
  CHECK(run.out.empty());
  // The replay runs the reference forward (planner/predict/dpo_reference.h) and keeps no
  // copy under LoRA (the adapter-disabled base): its peak is the walk's.
  const RunOutput replay = run_headroom("simulate " + quoted(plan) + " --json");
  REQUIRE_MESSAGE(replay.exit_code == 0, replay.err);
  const nlohmann::json simulated = nlohmann::json::parse(replay.out)["simulation"];
  const RunOutput walked = run_headroom(kLora + " --recipe dpo --json");
  REQUIRE_MESSAGE(walked.exit_code == 0, walked.err);
  const double walk = nlohmann::json::parse(walked.out)["as_given"]["prediction"]["peak_allocated_bytes"];
  CHECK(simulated["peak_allocated_bytes"].get<double>() == doctest::Approx(walk).epsilon(0.02));
  bool reference_forward = false;
  const nlohmann::json timeline = nlohmann::json::parse(run_headroom("simulate " + quoted(plan) + " --json --events").out);
  for (const auto& event : timeline["simulation"]["events"]) {
    reference_forward = reference_forward || event.value("label", "").rfind("reference forward", 0) == 0;
  }
  CHECK(reference_forward);
}

TEST_CASE("--recipe reward names the score head in the stack line, simulates, and run refuses it by its recipe") {
  TempDir dir;
  const std::string plan = dir.file("reward-plan.json");
  const RunOutput fit = run_headroom(kLora + " --recipe reward --train score -o " + quoted(plan));
  REQUIRE_MESSAGE(fit.exit_code == 0, fit.err);
  CHECK(contains(fit.out, "reward modelling (chosen and rejected rows in one batch, a one-value score head"));
  const RunOutput replay = run_headroom("simulate " + quoted(plan) + " --json");
  CHECK_MESSAGE(replay.exit_code == 0, replay.err);
  const RunOutput run = run_headroom("run " + quoted(plan) + " --steps 1 --device cpu --json");
  CHECK(run.exit_code == 1);
  CHECK(contains(run.err, "RewardTrainer"));
  const RunOutput flux = run_headroom("fit tiny-flux --gpu 4090 --lora --recipe reward");
  CHECK(flux.exit_code != 0);
  CHECK(contains(flux.err, "causal LM"));
}

}  // namespace headroom
