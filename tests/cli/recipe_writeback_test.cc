// `plan --emit axolotl|llamafactory|xtuner`: the best plan written back into the
// user's own config. The patch is applied with patch(1) to a copy of the file,
// and the copy, read again, is the plan (issue 13: "the written-back patch
// applied to it gives the chosen plan").
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/cli_harness.h"

namespace headroom {
namespace {

using namespace cli_harness;

const std::string kData = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/";
const std::string kCurrentBnb = " --versions bitsandbytes=0.50.2";

// The settings of `fit --json` for a run.
nlohmann::json fitted_settings(const std::string& args) {
  const RunOutput fit = run_headroom("fit " + args + " --json");
  REQUIRE_MESSAGE(fit.exit_code == 0, fit.err);
  return parse_json(fit.out)["as_given"]["settings"];
}

// Plans `args` (the config flag among them), writes the `kind` export, applies
// its diff to `copy` and returns the plan's chosen config.
nlohmann::json plan_and_patch(const std::string& args, const std::string& kind, const std::string& copy,
                              const TempDir& dir) {
  const std::string exported = dir.file(kind + ".patch");
  // A current bitsandbytes: its QLoRA band is not what these tests are about (docs/stacks.md, "Releases").
  const RunOutput plan = run_headroom("plan " + args + kCurrentBnb + " --json -o " + quoted(dir.file("plan.json")) +
                                      " --emit " + kind + "=" + quoted(exported));
  REQUIRE_MESSAGE(plan.exit_code == 0, plan.err);
  const std::string text = read_text(exported);
  CAPTURE(text);
  REQUIRE(contains(text, "+++ "));
  const std::string command = "patch --quiet " + quoted(copy) + " < " + quoted(exported);
  REQUIRE(std::system(command.c_str()) == 0);
  return parse_json(read_text(dir.file("plan.json")))["config"];
}

// What MMEngine's DictAction and merge_from_dict make of `--cfg-options KEY=VALUE
// ...` on the config's JSON: a dotted key sets a nested value, read as an int, a
// bool (True / False), None or else a string (mmengine/config/config.py
// DictAction._parse_int_float_bool). The exporter test applies them with MMEngine
// itself (tests/exporter/mmengine_loader.sh).
nlohmann::json apply_cfg_options(nlohmann::json dump, const std::string& export_text) {
  const size_t at = export_text.find("--cfg-options");
  REQUIRE(at != std::string::npos);
  std::istringstream words(export_text.substr(at + 13, export_text.find('\n', at) - at - 13));
  for (std::string word; words >> word;) {
    const size_t eq = word.find('=');
    REQUIRE(eq != std::string::npos);
    const std::string value = word.substr(eq + 1);
    nlohmann::json* node = &dump["config"];
    std::istringstream path(word.substr(0, eq));
    for (std::string part; std::getline(path, part, '.');) node = &(*node)[part];
    if (value == "True" || value == "False") {
      *node = value == "True";
    } else if (value == "None") {
      *node = nullptr;
    } else if (value.find_first_not_of("0123456789") == std::string::npos) {
      *node = std::stoll(value);
    } else {
      *node = value;
    }
  }
  return dump;
}

}  // namespace

TEST_CASE("an axolotl config takes the written-back patch and then reads as the plan") {
  TempDir dir;
  const std::string copy = dir.file("qlora.yml");
  write_text(copy, read_text(kData + "axolotl/llama-3-qlora.yml"));
  // An 18 GiB budget: the config's micro-batch 2 without checkpointing does not fit.
  // (At 16 GiB nothing does since the loss's forward holds the 16-bit logits too.)
  const std::string budget = "llama-3-8b --gpu 4090 --gpu-mem 18GiB --no-offload --max-zero 0";
  const nlohmann::json before = fitted_settings(budget + " --axolotl " + quoted(copy));
  const nlohmann::json config = plan_and_patch(budget + " --axolotl " + quoted(copy), "axolotl", copy, dir);
  const nlohmann::json after = fitted_settings(budget + " --axolotl " + quoted(copy));
  CHECK(after["micro_batch"] == config["micro_batch"]);
  CHECK(after["grad_accum"] == config["grad_accum"]);
  CHECK(after != before);  // the patch changed the run
  CHECK(contains(read_text(copy), "micro_batch_size: " + std::to_string(config["micro_batch"].get<int>())));
}

TEST_CASE("a LLaMA-Factory config takes the written-back patch and then reads as the plan") {
  TempDir dir;
  const std::string copy = dir.file("sft.yaml");
  write_text(copy, read_text(kData + "llamafactory/llama3_lora_sft_otfq.yaml"));
  const std::string run =
      "llama-3-8b --gpu 4090 --gpu-mem 12GiB --no-offload --max-zero 0" + kCurrentBnb + " --llamafactory " + quoted(copy);
  // Micro-batch 8 does not fit 12 GiB: the plan keeps the global batch of 64 in
  // micro-batches of 1, so the file's accumulation (8) becomes 64.
  const nlohmann::json config = plan_and_patch(run + " --batch 8", "llamafactory", copy, dir);
  const nlohmann::json after = fitted_settings(run);
  CHECK(after["micro_batch"] == config["micro_batch"]);
  CHECK(after["grad_accum"] == config["grad_accum"]);
  CHECK(config["grad_accum"].get<int>() * config["micro_batch"].get<int>() == 64);
  // The run as the patched file says it fits.
  const RunOutput fit = run_headroom("fit " + run + " --json");
  CHECK(parse_json(fit.out)["fits"] == true);
}

TEST_CASE("an XTuner config: --cfg-options for xtuner train, and the top-level variables' lines patched") {
  TempDir dir;
  const std::string copy = dir.file("sft.py");
  write_text(copy, read_text(kData + "xtuner/llama3_8b_instruct_qlora_alpaca_e3.py"));
  // The loader's dump, pointed at the copy (no mmengine needed here).
  nlohmann::json dump = parse_json(read_text(kData + "xtuner/llama3_8b_instruct_qlora_alpaca_e3.dump.json"));
  dump["file"] = copy;
  const std::string dump_path = dir.file("sft.dump.json");
  write_text(dump_path, dump.dump());
  // Micro-batch 4 on 18 GiB: the planner brings it down to 1 and raises the
  // accumulation from the file's 16 to keep the global batch (64).
  const std::string run = "llama-3-8b --gpu 4090 --gpu-mem 18GiB --no-offload --max-zero 0 --xtuner " +
                          quoted(dump_path) + " --batch 4";
  const std::string exported = dir.file("xtuner.patch");
  const RunOutput plan = run_headroom("plan " + run + kCurrentBnb + " --json -o " + quoted(dir.file("plan.json")) +
                                      " --emit xtuner=" + quoted(exported));
  REQUIRE_MESSAGE(plan.exit_code == 0, plan.err);
  const nlohmann::json config = parse_json(read_text(dir.file("plan.json")))["config"];
  const std::string text = read_text(exported);
  CAPTURE(text);
  CHECK(contains(text, "# xtuner train " + copy + " --cfg-options"));
  CHECK(contains(text, "optim_wrapper.accumulative_counts=" + std::to_string(config["grad_accum"].get<int>())));
  REQUIRE(std::system(("patch --quiet " + quoted(copy) + " < " + quoted(exported)).c_str()) == 0);
  const std::string patched = read_text(copy);
  CHECK(config["grad_accum"] == 64);
  CHECK(contains(patched, "\naccumulative_counts = 64\n"));
  CHECK(contains(patched, "\nbatch_size = 1  # per device\n"));  // the file's micro-batch was already the plan's
  // The patched file, read again through its dump, is the plan.
  nlohmann::json reread = dump;
  reread["config"]["accumulative_counts"] = 64;
  reread["config"]["optim_wrapper"]["accumulative_counts"] = 64;
  write_text(dump_path, reread.dump());
  const nlohmann::json after = fitted_settings("llama-3-8b --gpu 4090 --xtuner " + quoted(dump_path));
  CHECK(after["grad_accum"] == 64);
  CHECK(after["micro_batch"] == config["micro_batch"]);
}

TEST_CASE("an mmpretrain config: --cfg-options for tools/train.py that read back as the plan") {
  // Batch 32 at 224 px (3.9 GiB as the config runs it) on a 3 GiB budget: the
  // plan halves the micro-batch and doubles the accumulation; with the
  // micro-batch fixed it checkpoints blocks instead, written as with_cp=True.
  for (const std::string freedom : {"", " --fixed-micro-batch"}) {
    CAPTURE(freedom);
    TempDir dir;
    const nlohmann::json dump = parse_json(read_text(kData + "mmpretrain/resnet50_8xb32_in1k.dump.json"));
    const std::string dump_path = dir.file("resnet.dump.json");
    write_text(dump_path, dump.dump());
    const std::string run = "--gpu 4090 --gpu-mem 3GiB --mmengine " + quoted(dump_path) + freedom;
    const nlohmann::json before = fitted_settings(run);
    const std::string exported = dir.file("mmengine.txt");
    const RunOutput plan = run_headroom("plan " + run + " --json -o " + quoted(dir.file("plan.json")) +
                                        " --emit mmengine=" + quoted(exported));
    REQUIRE_MESSAGE(plan.exit_code == 0, plan.err);
    const nlohmann::json planned = parse_json(read_text(dir.file("plan.json")));
    const nlohmann::json config = planned["config"];
    const std::string text = read_text(exported);
    CAPTURE(text);
    CHECK(contains(text, "# python tools/train.py tests/data/mmpretrain/configs/resnet/resnet50_8xb32_in1k.py "
                         "--cfg-options"));
    bool checkpointed = false;
    for (const auto& block : planned["blocks"]) checkpointed = checkpointed || block["choice"] != "keep";
    CHECK(checkpointed == !freedom.empty());
    CHECK(contains(text, "model.backbone.with_cp=True") == checkpointed);
    // The plan checkpoints some blocks; with_cp checkpoints them all: said.
    if (checkpointed) CHECK(contains(plan.out + plan.err, "with_cp=True is written"));
    // The overrides, applied as MMEngine applies them, read back as the plan.
    write_text(dump_path, apply_cfg_options(dump, text).dump());
    const nlohmann::json after = fitted_settings(run);
    CHECK(after["micro_batch"] == config["micro_batch"]);
    CHECK(after["grad_accum"] == config["grad_accum"]);
    CHECK((after["checkpointing"] != "none") == checkpointed);
    CHECK(after != before);
    // Read again, the config already runs the plan (with_cp on stays on).
    const RunOutput again = run_headroom("plan " + run + " --emit mmengine");
    REQUIRE_MESSAGE(again.exit_code == 0, again.err);
    CHECK(contains(again.out, "the config already runs the plan"));
  }
}

TEST_CASE("axolotl and LLaMA-Factory: quoted keys and values on their own line take the patch in place") {
  // Issue 37 item 7: the write-back appended a second key under a quoted one (a duplicate the
  // readers refuse) and left a value on the line below its key behind.
  struct Case {
    const char* kind;
    const char* source;
    const char* batch_key;
    std::string run;
    std::string plan_only;  // flags for the plan, not the file's run
  };
  const std::vector<Case> cases = {
      {"axolotl", "axolotl/llama-3-qlora.yml", "micro_batch_size",
       "llama-3-8b --gpu 4090 --gpu-mem 18GiB --no-offload --max-zero 0", ""},
      {"llamafactory", "llamafactory/llama3_lora_sft_otfq.yaml", "per_device_train_batch_size",
       "llama-3-8b --gpu 4090 --gpu-mem 12GiB --no-offload --max-zero 0", " --batch 8"}};
  for (const Case& c : cases) {
    CAPTURE(std::string(c.kind));
    TempDir dir;
    const std::string copy = dir.file("config.yaml");
    std::string text = read_text(kData + c.source);
    const std::string quote = std::string(c.kind) == "axolotl" ? "\"" : "'";
    const size_t batch = text.find(std::string("\n") + c.batch_key + ":");
    REQUIRE(batch != std::string::npos);
    text.insert(batch + 1 + std::string(c.batch_key).size(), quote);
    text.insert(batch + 1, quote);
    const std::string accumulation = "\ngradient_accumulation_steps: ";
    const size_t at = text.find(accumulation);
    REQUIRE(at != std::string::npos);
    text.replace(at, accumulation.size(), "\ngradient_accumulation_steps:\n  # steps\n  ");  // its value below it
    write_text(copy, text);
    const std::string run = c.run + " --" + c.kind + " " + quoted(copy);
    const nlohmann::json config = plan_and_patch(run + c.plan_only, c.kind, copy, dir);
    const std::string after = read_text(copy);
    CHECK(contains(after, quote + c.batch_key + quote + ": " + std::to_string(config["micro_batch"].get<int>())));
    CHECK(contains(after, "gradient_accumulation_steps:\n  # steps\n  " + std::to_string(config["grad_accum"].get<int>()) + "\n"));
    const nlohmann::json read = fitted_settings(c.run + kCurrentBnb + " --" + c.kind + " " + quoted(copy));
    CHECK(read["micro_batch"] == config["micro_batch"]);
    CHECK(read["grad_accum"] == config["grad_accum"]);
  }
}

TEST_CASE("--emit of a config kind the run was not read from names the flag it needs") {
  const RunOutput out = run_headroom("plan llama-3-8b --gpu 4090 --lora --emit axolotl");
  CHECK(out.exit_code == 2);
  CHECK(contains(out.err, "expected --axolotl FILE"));
}

TEST_CASE("an Accelerate DDP config and TrainingArguments take both written-back patches and then read as the plan") {
  TempDir dir;
  const std::string accelerate = dir.file("ddp.yaml");
  const std::string arguments = dir.file("args.json");
  // `accelerate config` for 4 GPUs with DDP (keys as it writes them, sorted;
  // docs/source/basic_tutorials/launch.md) and a TRL SFTConfig as JSON.
  write_text(accelerate,
             "compute_environment: LOCAL_MACHINE\ndebug: false\ndistributed_type: MULTI_GPU\ndowncast_bf16: 'no'\n"
             "gpu_ids: all\nmachine_rank: 0\nmain_training_function: main\nmixed_precision: bf16\nnum_machines: 1\n"
             "num_processes: 4\nrdzv_backend: static\nsame_network: true\nuse_cpu: false\n");
  write_text(arguments,
             R"({"output_dir": "out", "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, )"
             R"("bf16": true, "gradient_checkpointing": false, "max_length": 1024, "packing": true})");
  // Full fine-tuning of an 8B model does not fit four 80 GB GPUs with DDP: the plan shards.
  const std::string run =
      "llama-3-8b --gpu a100-80gb --accelerate " + quoted(accelerate) + " --hf-args " + quoted(arguments);
  const RunOutput plan = run_headroom("plan " + run + " --json -o " + quoted(dir.file("plan.json")) +
                                      " --emit accelerate=" + quoted(dir.file("acc.patch")) +
                                      " --emit hf-args=" + quoted(dir.file("args.patch")));
  REQUIRE_MESSAGE(plan.exit_code == 0, plan.err);
  const nlohmann::json config = parse_json(read_text(dir.file("plan.json")))["config"];
  REQUIRE(config["zero_stage"].get<int>() > 0);
  const std::string command = "patch --quiet " + quoted(accelerate) + " < " + quoted(dir.file("acc.patch"));
  REQUIRE(std::system(command.c_str()) == 0);
  CHECK(contains(read_text(accelerate), "distributed_type: DEEPSPEED\n"));
  CHECK(contains(read_text(accelerate), "main_training_function: main\n"));  // the user's keys stay
  // The Trainer's patch leaves ZeRO to the Accelerate file: no `deepspeed` key.
  const std::string args_patch = read_text(dir.file("args.patch"));
  CHECK_FALSE(contains(args_patch, "deepspeed"));
  nlohmann::json args = parse_json(read_text(arguments));
  args.merge_patch(parse_json(args_patch.substr(args_patch.find("{"))));
  write_text(arguments, args.dump());
  const nlohmann::json after = fitted_settings(run);
  CHECK(after["zero_stage"] == config["zero_stage"]);
  CHECK(after["offload_optimizer"] == config["offload_optimizer"]);
  CHECK(after["offload_param"] == config["offload_param"]);
  CHECK(after["micro_batch"] == config["micro_batch"]);
  CHECK(after["grad_accum"] == config["grad_accum"]);
  // Read again, the pair already runs the plan.
  const RunOutput again = run_headroom("plan " + run + " --emit accelerate");
  CHECK(contains(again.out, "no key to change"));
}

TEST_CASE("TrainingArguments beside an Accelerate FSDP config: gradient_checkpointing with fsdp_activation_checkpointing is refused") {
  TempDir dir;
  const std::string arguments = dir.file("args.json");
  write_text(arguments, R"({"per_device_train_batch_size": 1, "bf16": true, "gradient_checkpointing": true, "max_length": 2048})");
  const RunOutput fit = run_headroom("fit llama-3-8b --gpu a100-80gb --accelerate " + quoted(kData + "accelerate/fsdp_8gpu.yaml") +
                                     " --hf-args " + quoted(arguments));
  CHECK(fit.exit_code == 2);
  CHECK(contains(fit.err, "gradient_checkpointing"));
  CHECK(contains(fit.err, "fsdp_activation_checkpointing"));
  // Without it, the Accelerate file's checkpointing stays.
  write_text(arguments, R"({"per_device_train_batch_size": 1, "bf16": true, "max_length": 2048})");
  const nlohmann::json settings =
      fitted_settings("llama-3-8b --gpu a100-80gb --accelerate " + quoted(kData + "accelerate/fsdp_8gpu.yaml") +
                      " --hf-args " + quoted(arguments));
  CHECK(settings["checkpointing"] != "none");
}

}  // namespace headroom
