// End-to-end tests of the `headroom` binary: run it with popen, capture stdout,
// stderr and the exit status, and check what a user (or a script) relies on.
#include <doctest/doctest.h>

#include "tests/cli/cli_harness.h"
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

using namespace headroom::cli_harness;  // NOLINT(google-build-using-namespace): test helpers

TEST_CASE("gpus --json lists the catalogue") {
  const RunOutput run = run_headroom("gpus --json");
  REQUIRE(run.exit_code == 0);
  const nlohmann::json json = parse_json(run.out);
  CHECK(json["command"] == "gpus");
  bool found = false;
  for (const auto& gpu : json["gpus"]) {
    if (gpu["id"] == "a6000") {
      found = true;
      CHECK(gpu["memory_bytes"].get<int64_t>() > int64_t{47} << 30);
      CHECK(gpu["bf16_tflops"].get<double>() > 100);
    }
  }
  CHECK(found);
  CHECK(run.err.empty());
}

TEST_CASE("models --json lists the zoo with parameter counts") {
  const RunOutput run = run_headroom("models --json");
  REQUIRE(run.exit_code == 0);
  const nlohmann::json json = parse_json(run.out);
  bool found = false;
  for (const auto& model : json["models"]) {
    if (model["name"] == "llama-3-8b") {
      found = true;
      // Llama 3 8B has 8.03e9 parameters (meta-llama/Meta-Llama-3-8B model card).
      CHECK(model["parameters"].get<int64_t>() > 8'000'000'000);
      CHECK(model["parameters"].get<int64_t>() < 8'100'000'000);
    }
  }
  CHECK(found);
}

TEST_CASE("text listings and help") {
  CHECK(contains(run_headroom("gpus").out, "a6000"));
  CHECK(contains(run_headroom("models").out, "gpt2"));
  const RunOutput help = run_headroom("--help");
  CHECK(help.exit_code == 0);
  for (const char* command : {"fit", "plan", "models", "gpus"}) CHECK(contains(help.out, command));
  const RunOutput fit_help = run_headroom("fit --help");
  CHECK(fit_help.exit_code == 0);
  CHECK(contains(fit_help.out, "Examples:"));
  CHECK(contains(fit_help.out, "--gpu-mem"));
  CHECK(contains(run_headroom("plan --help").out, "-o"));
}

TEST_CASE("fit gpt2 on an A6000 fits, as JSON") {
  const RunOutput run = run_headroom("fit gpt2 --gpu a6000 --json");
  REQUIRE(run.exit_code == 0);
  const nlohmann::json json = parse_json(run.out);
  CHECK(json["command"] == "fit");
  CHECK(json["fits"] == true);
  CHECK(json["alternative"].is_null());
  CHECK(json["as_given"]["prediction"]["gpu_total_bytes"].get<int64_t>() > 0);
  CHECK(json["gpu"]["id"] == "a6000");
}

TEST_CASE("fit gpt2 in text shows the verdict and the breakdown") {
  const RunOutput run = run_headroom("fit gpt2 --gpu a6000");
  REQUIRE(run.exit_code == 0);
  CHECK(contains(run.out, "FITS on NVIDIA RTX A6000"));
  CHECK(contains(run.out, " GiB"));
  CHECK(contains(run.out, "optimizer states"));
  CHECK(contains(run.out, "Host RAM"));
  CHECK(contains(run.out, "Disk"));
  CHECK(contains(run.out, "ms per optimizer step"));
}

TEST_CASE("fit llama-3-8b on a 4090 does not fit and says what would") {
  const RunOutput run = run_headroom("fit llama-3-8b --gpu 4090");
  REQUIRE(run.exit_code == 0);  // "does not fit" is an answer, not an error
  CHECK(contains(run.out, "DOES NOT FIT on NVIDIA GeForce RTX 4090"));
  CHECK(contains(run.out, "short by"));
  // 16 GB of bf16 weights and gradients fit 24 GB only with the AdamW states and
  // fp32 master weights (~96 GB) off the GPU: the search finds that, and the
  // answer says it (not the "what would make it fit" of a search that failed).
  CHECK(contains(run.out, "The fastest plan that fits"));
  CHECK_FALSE(contains(run.out, "What would make it fit"));

  const RunOutput json_run = run_headroom("fit llama-3-8b --gpu 4090 --json");
  REQUIRE(json_run.exit_code == 0);
  const nlohmann::json json = parse_json(json_run.out);
  CHECK(json["fits"] == false);
  const nlohmann::json& alternative = json["alternative"];
  REQUIRE(alternative.is_object());
  CHECK(alternative["found"] == true);
  const nlohmann::json& best = alternative["best"];
  CHECK(best["config"]["offload_optimizer"] == "cpu");
  CHECK(best["prediction"]["fits"] == true);
  CHECK(best["prediction"]["gpu_total_bytes"].get<int64_t>() <= best["prediction"]["gpu_budget_bytes"].get<int64_t>());
}

TEST_CASE("settings flags reach the planner") {
  const RunOutput run = run_headroom("fit gpt2 --gpu-mem 48GB --batch 2 --seq 512 --lora --json");
  REQUIRE(run.exit_code == 0);
  const nlohmann::json json = parse_json(run.out);
  CHECK(json["gpu"]["memory_bytes"] == 48'000'000'000);
  CHECK(json["as_given"]["prediction"]["gpu_capacity_bytes"] == 48'000'000'000);
  CHECK(json["as_given"]["settings"]["micro_batch"] == 2);
  CHECK(json["as_given"]["settings"]["mode"] == "lora");
  CHECK(json["as_given"]["seq_len"] == 512);
}

TEST_CASE("--settings file, with flags overriding it") {
  TempDir dir;
  const std::string path = dir.file("settings.json");
  write_text(path, R"({"model": "gpt2", "gpu": "4090", "micro_batch": 4, "seq_len": 256})");
  const RunOutput run = run_headroom("fit --settings '" + path + "' --batch 2 --json");
  REQUIRE(run.exit_code == 0);
  const nlohmann::json json = parse_json(run.out);
  CHECK(json["gpu"]["id"] == "4090");
  CHECK(json["as_given"]["settings"]["micro_batch"] == 2);
  CHECK(json["as_given"]["seq_len"] == 256);

  write_text(path, R"({"micro_batch": "four"})");
  const RunOutput bad = run_headroom("fit gpt2 --settings '" + path + "'");
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.err, "micro_batch"));
  CHECK(contains(bad.err, path));

  write_text(path, "{not json");
  const RunOutput broken = run_headroom("fit gpt2 --settings '" + path + "'");
  CHECK(broken.exit_code == 2);
  CHECK(contains(broken.err, path));
}

TEST_CASE("unknown GPU is an error that lists the known ones") {
  const RunOutput run = run_headroom("fit gpt2 --gpu nosuchgpu");
  CHECK(run.exit_code == 1);
  CHECK(contains(run.err, "nosuchgpu"));
  CHECK(contains(run.err, "a6000"));
  CHECK(run.out.empty());
}

TEST_CASE("unknown model is an error naming it") {
  const RunOutput run = run_headroom("fit nosuchmodel --gpu a6000 --json");
  CHECK(run.exit_code == 1);
  CHECK(contains(run.err, "nosuchmodel"));
  CHECK(run.out.empty());  // no half JSON document on stdout
}

TEST_CASE("bad flag values are usage errors naming the flag") {
  struct Case {
    const char* args;
    const char* names;
  };
  for (const Case& c :
       {Case{"fit gpt2 --batch -1", "--batch"}, Case{"fit gpt2 --batch=-1", "--batch"},
        Case{"fit gpt2 --batch two", "--batch"}, Case{"fit gpt2 --seq 0", "--seq"},
        Case{"fit gpt2 --gpu-mem -24GiB", "--gpu-mem"}, Case{"fit gpt2 --gpu-mem 0", "--gpu-mem"},
        Case{"fit gpt2 --gpu-mem lots", "--gpu-mem"},
        Case{"fit gpt2 --host-ram 12XB", "--host-ram"}, Case{"fit gpt2 --zero 4", "--zero"},
        Case{"fit gpt2 --precision fp8", "--precision"},
        Case{"fit gpt2 --optimizer lion", "--optimizer"},
        Case{"fit gpt2 --safety-margin 0.9", "--safety-margin"},
        Case{"fit gpt2 --lora-targets q_proj,,v_proj", "--lora-targets"},
        Case{"fit gpt2 --mode full --qlora", "--qlora"},
        Case{"fit gpt2 --offload-param cpu", "offload_param"},
        Case{"fit gpt2 --no-such-flag", "--no-such-flag"}, Case{"plan gpt2 --gpus 0", "--gpus"},
        Case{"fit", "MODEL"}, Case{"frobnicate", "frobnicate"}}) {
    CAPTURE(c.args);
    const RunOutput run = run_headroom(c.args);
    CHECK(run.exit_code == 2);
    CHECK(contains(run.err, c.names));
    CHECK(run.out.empty());
  }
}

TEST_CASE("GPU memory below the CUDA context is refused with a clear message") {
  const RunOutput run = run_headroom("fit gpt2 --gpu a6000 --gpu-mem 100MiB");
  CHECK(run.exit_code == 2);
  CHECK(contains(run.err, "--gpu-mem"));
  CHECK(contains(run.err, "context"));
  CHECK(run.out.empty());
}

TEST_CASE("a malformed or missing layer-graph file is an input error naming the file") {
  // Status 2, as any input file the user names (docs/cli.md "Errors and exit status").
  TempDir dir;
  const std::string truncated = dir.file("truncated.json");
  write_text(truncated, R"({"version": 1, "name": "x", "nodes": [)");
  const RunOutput run = run_headroom("fit '" + truncated + "' --gpu a6000");
  CHECK(run.exit_code == 2);
  CHECK(contains(run.err, truncated));

  const std::string wrong = dir.file("wrong.json");
  write_text(wrong, R"({"version": 1, "name": 3})");
  const RunOutput wrong_run = run_headroom("fit '" + wrong + "' --gpu a6000");
  CHECK(wrong_run.exit_code == 2);
  CHECK(contains(wrong_run.err, wrong));

  const RunOutput missing = run_headroom("fit '" + dir.file("missing.json") + "'");
  CHECK(missing.exit_code == 2);
  CHECK(contains(missing.err, "missing.json"));
}

TEST_CASE("plan -o writes a plan file that parses") {
  TempDir dir;
  const std::string path = dir.file("plan.json");
  const RunOutput run = run_headroom("plan gpt2 --gpu a6000 -o '" + path + "'");
  REQUIRE(run.exit_code == 0);
  CHECK(contains(run.out, "frontier"));
  CHECK(contains(run.out, "Largest micro-batch"));
  CHECK(run.err.empty());  // stderr is not a terminal: no progress lines
  const nlohmann::json plan = parse_json(read_text(path));
  CHECK(plan["format"] == "headroom.plan");
  CHECK(plan["model"] == "gpt2");
  CHECK(plan["blocks"].is_array());
}

TEST_CASE("plan --json is one document with the frontier") {
  const RunOutput run = run_headroom("plan gpt2 --gpu a6000 --json");
  REQUIRE(run.exit_code == 0);
  const nlohmann::json json = parse_json(run.out);
  CHECK(json["command"] == "plan");
  CHECK(json["found"] == true);
  CHECK(json["frontier"].is_array());
  CHECK(json["max_micro_batch"].get<int64_t>() >= 1);
  CHECK(json["best"]["format"] == "headroom.plan");
  CHECK(json["output_file"].is_null());
}

TEST_CASE("plan -o to an unwritable place fails without a crash") {
  const RunOutput run = run_headroom("plan gpt2 --gpu a6000 -o /nonexistent-dir/plan.json");
  CHECK(run.exit_code == 1);
  CHECK(contains(run.err, "/nonexistent-dir/plan.json"));
}

}  // namespace

TEST_CASE("fit names the stack it assumed, --stack, --optimizer-impl and --loss reach the planner") {
  const RunOutput text =
      run_headroom("fit gpt2 --gpu a100-80g --precision bf16 --checkpointing every --seq 128 --stack torchtune");
  REQUIRE(text.exit_code == 0);
  CHECK(contains(text.out, "stack torchtune: optimizer step fused to foreach, loss chunked:8"));
  CHECK(contains(text.out, "Band: "));
  const RunOutput pinned = run_headroom(
      "fit llama-3-8b --gpu a100-80g --lora --seq 2048 --stack torchtune --optimizer-impl fused --json");
  REQUIRE(pinned.exit_code == 0);
  const nlohmann::json j = parse_json(pinned.out);
  CHECK(j["as_given"]["settings"]["stack"] == "torchtune");
  CHECK(j["as_given"]["settings"]["optimizer_impl"] == "fused");
  CHECK(j["as_given"]["prediction"]["band_unknowns"].empty());
  CHECK(j["tight"] == false);
  const RunOutput bad = run_headroom("fit llama-3-8b --loss chunked:0");
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.err, "--loss"));
  const RunOutput bad_stack = run_headroom("fit llama-3-8b --stack axolotl");
  CHECK(bad_stack.exit_code == 2);
  CHECK(contains(bad_stack.err, "hf-trainer"));
}

TEST_CASE("the stack line names recompute, offloaded checkpoint inputs, adapters and compile, the flags reach JSON") {
  const RunOutput titan =
      run_headroom("fit tiny-llama --gpu a6000 --stack torchtitan --checkpointing every --compile");
  REQUIRE(titan.exit_code == 0);
  CHECK(contains(titan.out, "checkpointed blocks recompute block to selective-op, torch.compile (docs/stacks.md)"));
  // fp8 linears and which FSDP shards are named too.
  const RunOutput fp8 =
      run_headroom("fit tiny-llama --gpu h100-sxm --gpus 8 --zero 3 --stack torchtitan --float8 tensorwise");
  REQUIRE(fp8.exit_code == 0);
  CHECK(contains(fp8.out, ", sharded by FSDP2, forward without autocast, fp8 linears (torchao tensorwise) (docs/stacks.md)"));
  const RunOutput fsdp1 = run_headroom("fit tiny-llama --gpu a100 --gpus 8 --zero 3 --sharding fsdp1");
  REQUIRE(fsdp1.exit_code == 0);
  CHECK(contains(fsdp1.out, "sharded by FSDP1"));
  // tiny-llama's band is narrower than the 0.1 GiB the report shows: no "Band: 0.4 GiB to 0.4 GiB".
  CHECK_FALSE(contains(titan.out, "Band: "));
  const RunOutput tune = run_headroom(
      "fit tiny-llama --gpu a6000 --stack torchtune --mode lora --precision bf16 --checkpointing every "
      "--offload-checkpoint-inputs --recompute block --adapter-dtype fp32 --no-double-quant --json");
  REQUIRE(tune.exit_code == 0);
  const nlohmann::json settings = parse_json(tune.out)["as_given"]["settings"];
  CHECK(settings["recompute"] == "block");
  CHECK(settings["adapter_dtype"] == "fp32");
  CHECK(settings["offload_checkpoint_inputs"] == true);
  CHECK(settings["nf4_double_quant"] == false);
  CHECK(settings["compile"] == false);
  const RunOutput bad = run_headroom("fit tiny-llama --adapter-dtype bf16");
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.err, "fp32, model"));
}
