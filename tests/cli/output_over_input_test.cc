// Issue 37, item 1: no output of `headroom` (-o, --emit KIND=FILE, run's
// --metrics ...) may be a file the command reads, however it is spelled: the
// same path, a symbolic link, a hard link, a path through "./". The command is
// refused (exit 2, both flags named) before anything is written.
#include <filesystem>
#include <string>
#include <vector>

#include "tests/cli/cli_harness.h"

namespace headroom {
namespace {

using namespace cli_harness;  // NOLINT(google-build-using-namespace): test helpers

const std::string kData = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/";

// One write-back kind, the flag that reads its config and a config it reads.
struct WriteBack {
  const char* kind;
  const char* command;  // before the config flag
  const char* flag;
  const char* config;   // under tests/data
};

const std::vector<WriteBack>& write_backs() {
  static const std::vector<WriteBack> rows = {
      {"torchtune", "plan --gpu 4090 --seq 2048", "--torchtune", "torchtune/llama3_2_3B_lora_single_device.yaml"},
      {"hf-args", "plan llama-3-8b --gpu 4090", "--hf-args", "hf_trainer/training_args_qlora.json"},
      {"axolotl", "plan llama-3-8b --gpu 4090", "--axolotl", "axolotl/llama-3-qlora.yml"},
      {"llamafactory", "plan llama-3-8b --gpu 4090", "--llamafactory", "llamafactory/llama3_lora_sft_otfq.yaml"},
      {"accelerate", "plan llama-3-8b --lora --gpu 4090", "--accelerate", "accelerate/ddp_2gpu.yaml"},
      {"xtuner", "plan llama-3-8b --gpu 4090", "--xtuner", "xtuner/llama3_8b_instruct_qlora_alpaca_e3.dump.json"},
      {"mmengine", "plan --gpu 4090", "--mmengine", "mmpretrain/resnet50_8xb32_in1k.dump.json"},
      {"deepspeed", "plan llama-3-8b --lora --gpu 4090", "--deepspeed", "deepspeed/zero2_seed.json"},
  };
  return rows;
}

// The ways one file can be named: itself, a symbolic link, a hard link, "./".
std::vector<std::string> spellings(const TempDir& dir, const std::string& file) {
  const std::string symlink = dir.file("symlink");
  const std::string hardlink = dir.file("hardlink");
  fs::create_symlink(file, symlink);
  fs::create_hard_link(file, hardlink);
  return {file, symlink, hardlink, dir.str() + "/./" + fs::path(file).filename().string()};
}

void check_refused(const RunOutput& run, const std::string& output_flag, const std::string& input_flag) {
  CHECK(run.exit_code == 2);
  CHECK_MESSAGE(contains(run.err, output_flag), run.err);
  CHECK_MESSAGE(contains(run.err, "is the same file as " + input_flag), run.err);
}

}  // namespace

TEST_CASE("--emit KIND=FILE over the config it is read from is refused, the config kept, however FILE is spelled") {
  for (const WriteBack& row : write_backs()) {
    CAPTURE(row.kind);
    TempDir dir;
    const std::string config = dir.file(fs::path(row.config).filename().string());
    fs::copy_file(kData + row.config, config);
    const std::string before = read_text(config);
    for (const std::string& output : spellings(dir, config)) {
      CAPTURE(output);
      const RunOutput run = run_headroom(std::string(row.command) + " " + row.flag + " " + quoted(config) +
                                         " --emit " + row.kind + "=" + quoted(output));
      check_refused(run, std::string("--emit ") + row.kind + " " + output, row.flag);
      CHECK(read_text(config) == before);
    }
  }
}

TEST_CASE("one --emit over an input refuses the command before any other export or -o is written") {
  TempDir dir;
  const std::string config = dir.file("tt.yaml");
  fs::copy_file(kData + "torchtune/llama3_2_3B_lora_single_device.yaml", config);
  const RunOutput run =
      run_headroom("plan --gpu 4090 --seq 2048 --torchtune " + quoted(config) + " -o " + quoted(dir.file("plan.json")) +
                   " --emit deepspeed=" + quoted(dir.file("ds.json")) + " --emit torchtune=" + quoted(config));
  check_refused(run, "--emit torchtune", "--torchtune");
  CHECK_FALSE(fs::exists(dir.file("plan.json")));
  CHECK_FALSE(fs::exists(dir.file("ds.json")));
  // Beside the config, the same command writes all three.
  const RunOutput beside =
      run_headroom("plan --gpu 4090 --seq 2048 --torchtune " + quoted(config) + " -o " + quoted(dir.file("plan.json")) +
                   " --emit deepspeed=" + quoted(dir.file("ds.json")) + " --emit torchtune=" + quoted(dir.file("tt.patch")));
  CHECK_MESSAGE(beside.exit_code == 0, beside.err);
  CHECK(fs::exists(dir.file("tt.patch")));
}

TEST_CASE("-o over an input (a config, MODEL, --settings, PLAN) is refused for fit, plan, report and run") {
  TempDir dir;
  const std::string ds = dir.file("ds.json");
  fs::copy_file(kData + "deepspeed/zero2_seed.json", ds);
  const std::string model = dir.file("toy_mlp.json");
  fs::copy_file(kData + "toy_mlp.json", model);
  const std::string settings = dir.file("settings.json");
  write_text(settings, R"({"model": "tiny-llama", "gpu": "a6000"})");
  const std::string plan = dir.file("plan.json");
  REQUIRE(run_headroom("fit tiny-llama --gpu a6000 -o " + quoted(plan)).exit_code == 0);
  const std::vector<std::string> kept = {read_text(ds), read_text(model), read_text(settings), read_text(plan)};
  check_refused(run_headroom("fit llama-3-8b --lora --gpu 4090 --deepspeed " + quoted(ds) + " -o " + quoted(ds)), "-o",
                "--deepspeed");
  check_refused(run_headroom("plan " + quoted(model) + " --gpu 4090 -o " + quoted(model)), "-o", "MODEL");
  check_refused(run_headroom("plan --settings " + quoted(settings) + " -o " + quoted(settings)), "-o", "--settings");
  check_refused(run_headroom("report " + quoted(plan) + " -o " + quoted(plan)), "-o", "PLAN");
  check_refused(run_headroom("run " + quoted(plan) + " --steps 1 --metrics " + quoted(plan)), "--metrics", "PLAN");
  CHECK(kept == std::vector<std::string>{read_text(ds), read_text(model), read_text(settings), read_text(plan)});
}

namespace {

// A config that names a DeepSpeed file `ds` (a path relative to the folder the
// command runs in), with the flag that reads it and the key that names it.
struct NamingConfig {
  const char* flag;
  const char* extra;  // flags the run needs beside it
  const char* key;
  const char* file;
  std::string text;
};

std::vector<NamingConfig> configs_naming(const std::string& ds) {
  std::string axolotl = read_text(kData + "axolotl/llama-3-qlora.yml");
  const size_t key = axolotl.find("\ndeepspeed:\n");
  REQUIRE(key != std::string::npos);
  axolotl.replace(key, 12, "\ndeepspeed: " + ds + "\n");
  return {
      {"--axolotl", "", "deepspeed", "ax.yml", axolotl},
      {"--llamafactory", "", "deepspeed", "lf.yaml",
       read_text(kData + "llamafactory/llama3_lora_sft_otfq.yaml") + "\ndeepspeed: " + ds + "\n"},
      {"--hf-args", "--lora", "deepspeed", "args.txt", "--per_device_train_batch_size 1 --bf16 true --deepspeed " + ds},
      {"--accelerate", "--lora", "deepspeed_config.deepspeed_config_file", "acc.yaml",
       "deepspeed_config:\n  deepspeed_config_file: " + ds + "\ndistributed_type: DEEPSPEED\nnum_processes: 1\n"},
  };
}

}  // namespace

TEST_CASE("--emit deepspeed and -o over the DeepSpeed file a config names are refused, the file kept") {
  TempDir dir;
  const std::string ds = dir.file("ds.json");
  const std::string text = R"({"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"},
                               "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"})";
  write_text(ds, text);
  for (const NamingConfig& config : configs_naming("ds.json")) {
    CAPTURE(config.flag);
    write_text(dir.file(config.file), config.text);
    const std::string read = std::string(config.flag) + " " + config.file;
    const std::string base = " tiny-llama --gpu 4090 --seq 256 " + std::string(config.extra) + " " + read;
    const std::string named = read + ": " + config.key;  // "--hf-args args.txt: deepspeed"
    const RunOutput beside =
        run_headroom("plan" + base + " --emit deepspeed=" + quoted(dir.file("out.json")), "", dir.str());
    CHECK_MESSAGE(beside.exit_code == 0, beside.err);  // the config reads, and the export is written elsewhere
    for (const std::string& ds_spelling : {ds, dir.str() + "/./ds.json"}) {
      const RunOutput emit = run_headroom("plan" + base + " --emit deepspeed=" + quoted(ds_spelling), "", dir.str());
      check_refused(emit, "--emit deepspeed " + ds_spelling, named + " ds.json");
      const RunOutput output = run_headroom("fit" + base + " -o " + quoted(ds_spelling), "", dir.str());
      check_refused(output, "-o " + ds_spelling, named + " ds.json");
    }
    CHECK(read_text(ds) == text);
  }
}

}  // namespace headroom
