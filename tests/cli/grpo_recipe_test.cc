// --recipe grpo: TRL's GRPOTrainer from the command line and from a GRPOConfig
// (--hf-args) to the stack line, the peak's phase and the settings; what is not
// modelled refused by name; `run` and `simulate` refuse a GRPO plan (docs/stacks.md,
// "Recipes").
#include <fstream>
#include <string>

#include "tests/cli/cli_harness.h"

namespace headroom {
namespace {

using namespace cli_harness;

const std::string kGrpo = "fit tiny-llama --gpu 4090 --lora --precision bf16 --stack hf-trainer --seq 128 "
                          "--batch 4 --recipe grpo --completion-tokens 64 --num-generations 4";

std::string written(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.file(name);
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("--recipe grpo names the generation and the reference in the stack line and keeps its settings") {
  const RunOutput lora = run_headroom(kGrpo);
  REQUIRE_MESSAGE(lora.exit_code == 0, lora.err);
  CHECK(contains(lora.out, "GRPO (generation with a KV cache"));
  CHECK(contains(lora.out, "reference none (beta 0)"));
  // beta != 0 under LoRA: GRPOTrainer's reference is the adapter-disabled base, whichever was given.
  const RunOutput copy = run_headroom(kGrpo + " --reference copy");
  REQUIRE_MESSAGE(copy.exit_code == 0, copy.err);
  CHECK(contains(copy.out, "reference the base with adapters disabled"));
  const RunOutput json = run_headroom(kGrpo + " --reference adapter-disabled --steps-per-generation 2 --json");
  REQUIRE_MESSAGE(json.exit_code == 0, json.err);
  const nlohmann::json settings = parse_json(json.out)["as_given"]["settings"];
  CHECK(settings["recipe"] == "grpo");
  CHECK(settings["reference"] == "adapter-disabled");
  CHECK(settings["completion_tokens"] == 64);
  CHECK(settings["num_generations"] == 4);
  CHECK(settings["steps_per_generation"] == 2);
}

TEST_CASE("--recipe grpo refuses what it does not model, naming the field") {
  const RunOutput short_row = run_headroom(kGrpo + " --completion-tokens 128");
  CHECK(short_row.exit_code == 2);
  CHECK(contains(short_row.err, "seq_len"));
  const RunOutput groups = run_headroom(kGrpo + " --num-generations 3");
  CHECK(groups.exit_code == 2);
  CHECK(contains(groups.err, "num_generations"));
  const RunOutput amp = run_headroom("fit tiny-llama --gpu 4090 --lora --precision bf16-amp --seq 128 --recipe grpo "
                                     "--completion-tokens 64 --batch 8");
  CHECK(amp.exit_code == 2);
  CHECK(contains(amp.err, "precision"));
  const RunOutput precomputed = run_headroom(kGrpo + " --reference precomputed");
  CHECK(precomputed.exit_code == 2);
  CHECK(contains(precomputed.err, "reference"));
  const RunOutput alone = run_headroom("fit tiny-llama --gpu 4090 --lora --seq 128 --completion-tokens 64");
  CHECK(alone.exit_code == 2);
  CHECK(contains(alone.err, "expected recipe grpo"));
}

TEST_CASE("--hf-args reads a GRPOConfig by importance_sampling_level") {
  TempDir dir;
  const std::string grpo = written(dir, "grpo.json", R"({"per_device_train_batch_size": 4, "bf16": true,
      "importance_sampling_level": "token", "num_generations": 4, "max_completion_length": 64, "beta": 0.04,
      "use_vllm": false, "steps_per_generation": null, "generation_batch_size": 8, "loss_type": "dapo",
      "model_init_kwargs": {"dtype": "bfloat16"}})");
  const RunOutput read = run_headroom("fit tiny-llama --lora --gpu 4090 --seq 128 --hf-args " + quoted(grpo) +
                                      " --json");
  REQUIRE_MESSAGE(read.exit_code == 0, read.err);
  const nlohmann::json settings = parse_json(read.out)["as_given"]["settings"];
  CHECK(settings["recipe"] == "grpo");
  CHECK(settings["completion_tokens"] == 64);
  CHECK(settings["num_generations"] == 4);
  CHECK(settings["steps_per_generation"] == 2);
  CHECK(settings["reference"] != "none");  // beta 0.04
  CHECK(settings["precision"] == "bf16");
  // Under LoRA TRL's reference is the adapter-disabled base.
  const RunOutput words = run_headroom("fit tiny-llama --lora --gpu 4090 --seq 128 --hf-args " + quoted(grpo));
  REQUIRE_MESSAGE(words.exit_code == 0, words.err);
  CHECK(contains(words.out, "reference the base with adapters disabled"));

}

TEST_CASE("--hf-args reads GRPOConfig's vLLM fields into the generation engine and refuses the rest by name") {
  TempDir dir;
  const std::string sleep = written(dir, "sleep.json", R"({"importance_sampling_level": "token", "use_vllm": true,
      "vllm_mode": "colocate", "vllm_enable_sleep_mode": true, "vllm_gpu_memory_utilization": 0.25,
      "vllm_max_model_length": 192, "vllm_tensor_parallel_size": 1, "vllm_server_port": 8000,
      "max_completion_length": 64, "num_generations": 4, "bf16": true, "per_device_train_batch_size": 4,
      "model_init_kwargs": {"dtype": "bfloat16"}})");
  const RunOutput read = run_headroom("fit tiny-llama --lora --gpu 4090 --seq 128 --hf-args " + quoted(sleep) +
                                      " --json");
  REQUIRE_MESSAGE(read.exit_code == 0, read.err);
  const nlohmann::json settings = parse_json(read.out)["as_given"]["settings"];
  CHECK(settings["generation"] == "vllm-colocate-sleep");
  CHECK(settings["vllm_gpu_memory_utilization"] == 0.25);
  CHECK(settings["vllm_max_model_len"] == 192);
  const std::string server = written(dir, "server.json", R"({"importance_sampling_level": "token",
      "use_vllm": true, "vllm_mode": "server", "max_completion_length": 64, "num_generations": 4, "bf16": true,
      "model_init_kwargs": {"dtype": "bfloat16"}})");
  const RunOutput served = run_headroom("fit tiny-llama --lora --gpu 4090 --seq 128 --batch 4 --hf-args " +
                                        quoted(server) + " --json");
  REQUIRE_MESSAGE(served.exit_code == 0, served.err);
  CHECK(parse_json(served.out)["as_given"]["settings"]["generation"] == "vllm-server");
  const std::string tp = written(dir, "tp.json", R"({"importance_sampling_level": "token", "use_vllm": true,
      "vllm_tensor_parallel_size": 2, "max_completion_length": 64})");
  const RunOutput parallel = run_headroom("fit tiny-llama --lora --gpu 4090 --seq 128 --hf-args " + quoted(tp));
  CHECK(parallel.exit_code == 2);
  CHECK(contains(parallel.err, "vllm_tensor_parallel_size"));
  const std::string uncorrected = written(dir, "is.json", R"({"importance_sampling_level": "token",
      "use_vllm": true, "vllm_importance_sampling_correction": false, "max_completion_length": 64})");
  const RunOutput no_is = run_headroom("fit tiny-llama --lora --gpu 4090 --seq 128 --hf-args " + quoted(uncorrected));
  CHECK(no_is.exit_code == 2);
  CHECK(contains(no_is.err, "vllm_importance_sampling_correction"));
}

TEST_CASE("--generation vllm-colocate shows vLLM's share as its own line, and refuses a share vLLM cannot start with") {
  const std::string colocated = kGrpo + " --generation vllm-colocate --vllm-max-model-len 128";
  const RunOutput text = run_headroom(colocated);
  REQUIRE_MESSAGE(text.exit_code == 0, text.err);
  CHECK(contains(text.out, "vLLM (colocated)"));
  CHECK(contains(text.out, "generation by vLLM colocated"));
  const RunOutput json = run_headroom(colocated + " --vllm-gpu-memory-utilization 0.5 --json");
  REQUIRE_MESSAGE(json.exit_code == 0, json.err);
  const nlohmann::json given = parse_json(json.out)["as_given"];
  CHECK(given["settings"]["generation"] == "vllm-colocate");
  CHECK(given["settings"]["vllm_gpu_memory_utilization"] == 0.5);
  // Half of the 4090's nvidia-smi 24564 MiB, rounded up as vLLM's request_memory does.
  CHECK(given["prediction"]["breakdown"]["vllm_bytes"] == (24564LL << 20) / 2);
  const RunOutput greedy = run_headroom(colocated + " --vllm-gpu-memory-utilization 1");
  CHECK(greedy.exit_code == 2);
  CHECK(contains(greedy.err, "vLLM will not start"));
  const RunOutput stray = run_headroom(kGrpo + " --vllm-gpu-memory-utilization 0.5");
  CHECK(stray.exit_code == 2);
  CHECK(contains(stray.err, "vllm_gpu_memory_utilization"));
}

TEST_CASE("run, simulate refuse a GRPO plan by its recipe") {
  TempDir dir;
  const std::string plan = dir.file("grpo-plan.json");
  const RunOutput fit = run_headroom(kGrpo + " -o " + quoted(plan));
  REQUIRE_MESSAGE(fit.exit_code == 0, fit.err);
  const RunOutput run = run_headroom("run " + quoted(plan) + " --steps 1 --device cpu --json");
  CHECK(run.exit_code == 1);
  CHECK(contains(run.err, "settings.recipe"));
  CHECK(contains(run.err, "grpo"));
  const RunOutput replay = run_headroom("simulate " + quoted(plan) + " --json");
  CHECK(replay.exit_code == 2);
  CHECK(contains(replay.err, "generation"));
}
}  // namespace headroom
