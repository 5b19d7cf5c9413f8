// End-to-end: plan --emit, fit --deepspeed, simulate. Reuses the binary-running
// helpers of cli_test.cc through a small copy (each test file stands alone).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

struct Output {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("headroom_export_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  return dir / name;
}

Output headroom(const std::string& args) {
  const std::string err_path = scratch("stderr.txt").string();
  const std::string command = std::string("'") + HEADROOM_BINARY + "' " + args + " 2>'" + err_path + "'";
  Output result;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) result.out.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.err = read_all(err_path);
  return result;
}

const std::string kData = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/";

}  // namespace

TEST_CASE("plan --emit writes DeepSpeed and torch exports that read back") {
  const std::string plan = scratch("plan.json").string();
  const std::string ds = scratch("ds.json").string();
  const std::string py = scratch("apply_plan.py").string();
  const Output r = headroom("plan llama-3-8b --gpu 4090 --qlora --seq 1024 -o '" + plan + "' --emit deepspeed='" + ds +
                            "' --emit torch='" + py + "'");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const nlohmann::json config = nlohmann::json::parse(read_all(ds));
  CHECK(config.contains("zero_optimization"));
  CHECK(config.at("train_micro_batch_size_per_gpu").get<int>() >= 1);
  CHECK(read_all(py).find("use_reentrant=False") != std::string::npos);
  // The exported DeepSpeed config, given back to `fit` with the plan's blocks,
  // predicts the same peak and step time as the plan.
  const nlohmann::json planned = nlohmann::json::parse(read_all(plan));
  std::string blocks;
  for (const auto& block : planned.at("blocks")) {
    if (block.at("choice") == "checkpoint") blocks += (blocks.empty() ? "" : ",") + block.at("name").get<std::string>();
  }
  const bool offloads = planned.dump().find("\"offload\"") != std::string::npos &&
                        planned.dump().find("\"choice\":\"offload\"") != std::string::npos;
  const Output again = headroom("fit llama-3-8b --gpu 4090 --qlora --seq 1024 --deepspeed '" + ds + "'" +
                                (blocks.empty() ? "" : " --checkpoint-blocks " + blocks) + " --json");
  INFO(again.err);
  REQUIRE(again.exit_code == 0);
  const nlohmann::json fit = nlohmann::json::parse(again.out);
  if (!offloads) {  // activation offload is not expressible as flags; compare only plain plans
    CHECK(fit.at("as_given").at("prediction").at("gpu_total_bytes") == planned.at("prediction").at("gpu_total_bytes"));
    CHECK(fit.at("as_given").at("prediction").at("time").at("step_ms").get<double>() ==
          doctest::Approx(planned.at("prediction").at("time").at("step_ms").get<double>()));
  }
  const Output bad_kind = headroom("plan gpt2 --emit onnx");
  CHECK(bad_kind.exit_code == 2);
  CHECK(bad_kind.err.find("--emit") != std::string::npos);
}

TEST_CASE("fit --deepspeed answers for a DeepSpeed config and refuses inconsistent ones") {
  const Output ok = headroom("fit llava-llama-3-8b --gpu 3090 --qlora --deepspeed '" + kData +
                             "deepspeed/zero2_offload_auto.json' --json");
  INFO(ok.err);
  REQUIRE(ok.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(ok.out);
  CHECK(j.dump().find("\"zero_stage\":2") != std::string::npos);
  const Output bad = headroom("fit gpt2 --deepspeed '" + kData + "deepspeed/bad_batch.json'");
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("train_batch_size") != std::string::npos);
  CHECK(bad.err.find("bad_batch.json") != std::string::npos);
}

TEST_CASE("fit --torchtune answers for a recipe config, MODEL and flags override it, ignored keys are listed") {
  const std::string config = kData + "torchtune/llama3_2_3B_lora_single_device.yaml";
  const Output ok = headroom("fit --torchtune '" + config +
                            "' --torchtune-set tokenizer.max_seq_len=2048 --torchtune-set batch_size=2 --gpu 4090 --json");
  INFO(ok.err);
  REQUIRE(ok.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(ok.out);
  const std::string dumped = j.dump();
  CHECK(dumped.find("\"model\":\"torchtune.models.llama3_2.lora_llama3_2_3b\"") != std::string::npos);
  CHECK(dumped.find("\"micro_batch\":2") != std::string::npos);
  CHECK(dumped.find("\"stack\":\"torchtune\"") != std::string::npos);
  CHECK(ok.err.find("keys not read") != std::string::npos);
  CHECK(ok.err.find("lr_scheduler") != std::string::npos);
  // More than one GPU runs torchtune's distributed recipe, which shards (FSDP2).
  const Output gpus = headroom("fit --torchtune '" + config + "' --seq 1024 --gpus 4 --gpu 4090 --json");
  REQUIRE(gpus.exit_code == 0);
  CHECK(nlohmann::json::parse(gpus.out).dump().find("\"zero_stage\":3") != std::string::npos);
  // A flag overrides the config: --batch after it wins over batch_size.
  const Output flag = headroom("fit --torchtune '" + config + "' --seq 1024 --batch 1 --gpu 4090 --json");
  REQUIRE(flag.exit_code == 0);
  CHECK(nlohmann::json::parse(flag.out).dump().find("\"micro_batch\":1") != std::string::npos);
  // As published, the padded length is unknown: refused until --seq says.
  const Output unknown = headroom("fit --torchtune '" + config + "' --gpu 4090");
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.err.find("a null tokenizer.max_seq_len") != std::string::npos);
  const Output orphan = headroom("fit gpt2 --torchtune-set batch_size=2");
  CHECK(orphan.exit_code == 2);
  CHECK(orphan.err.find("--torchtune-set: ") != std::string::npos);
}

TEST_CASE("fit --hf-args and --peft answer for a Trainer run, MODEL and --seq complete it") {
  const std::string args = kData + "hf_trainer/training_args_qlora.json";
  const std::string peft = kData + "hf_trainer/adapter_config.json";
  const Output ok = headroom("fit llama-3-8b --qlora --hf-args '" + args + "' --peft '" + peft + "' --seq 1024 --gpu 4090 --json");
  INFO(ok.err);
  REQUIRE(ok.exit_code == 0);
  const std::string dumped = nlohmann::json::parse(ok.out).dump();
  CHECK(dumped.find("\"stack\":\"hf-trainer\"") != std::string::npos);
  CHECK(dumped.find("\"rank\":64") != std::string::npos);
  CHECK(dumped.find("\"paged_optimizer\":true") != std::string::npos);
  CHECK(ok.err.find("TrainingArguments: keys not read") != std::string::npos);
  // TrainingArguments carry no sequence length: refused until --seq says.
  const Output no_seq = headroom("fit llama-3-8b --hf-args '" + args + "' --gpu 4090");
  CHECK(no_seq.exit_code == 2);
  CHECK(no_seq.err.find("--hf-args: ") != std::string::npos);
  CHECK(no_seq.err.find("expected --seq N") != std::string::npos);
  const Output both = headroom("fit llama-3-8b --hf-args '" + args + "' --torchtune x.yaml --seq 512");
  CHECK(both.exit_code == 2);
  CHECK(both.err.find("a torchtune run has no TrainingArguments") != std::string::npos);
  // hybrid_shard shards within a node: the group is the node's GPUs, known only from --gpus.
  const std::string hybrid = scratch("hybrid_args.json").string();
  std::ofstream(hybrid) << R"({"per_device_train_batch_size": 1, "fsdp": "hybrid_shard auto_wrap"})";
  const Output sharded = headroom("fit llama-3-8b --hf-args '" + hybrid + "' --gpus 8 --nodes 2 --seq 1024 --json");
  INFO(sharded.err);
  REQUIRE(sharded.exit_code == 0);
  const std::string s = nlohmann::json::parse(sharded.out).dump();
  CHECK(s.find("\"shard_gpus\":8") != std::string::npos);
  CHECK(s.find("\"zero_stage\":3") != std::string::npos);
}

TEST_CASE("plan --emit torchtune writes the plan back as overrides and a patch of the config") {
  const std::string config = kData + "torchtune/llama3_2_3B_lora_single_device.yaml";
  const std::string out = scratch("tt.patch").string();
  const Output ok = headroom("plan --torchtune '" + config +
                             "' --torchtune-set tokenizer.max_seq_len=4096 --torchtune-set enable_activation_checkpointing=False "
                             "--gpu 4090 --emit torchtune='" + out + "'");
  INFO(ok.err);
  REQUIRE(ok.exit_code == 0);
  const std::string patch = read_all(out);
  CHECK(patch.find("#     tokenizer.max_seq_len=4096") != std::string::npos);  // the given overrides first
  CHECK(patch.find("+++ " + config) != std::string::npos);
  CHECK(patch.find("-batch_size: 4\n+batch_size: ") != std::string::npos);
  // Without the config to patch, the export is refused by name.
  const Output orphan = headroom("plan tiny-llama --gpu 4090 --emit torchtune");
  CHECK(orphan.exit_code == 2);
  CHECK(orphan.err.find("--emit torchtune: the keys to change in the file the run was read from (a patch") !=
        std::string::npos);
  CHECK(orphan.err.find("expected --torchtune FILE with it") != std::string::npos);
}

TEST_CASE("simulate replays a plan file, and refuses bad ones clearly") {
  const std::string plan = scratch("sim_plan.json").string();
  REQUIRE(headroom("plan gpt2 --gpu a6000 --batch 4 --fixed-micro-batch -o '" + plan + "'").exit_code == 0);
  const Output text = headroom("simulate '" + plan + "'");
  INFO(text.err);
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("peak reserved") != std::string::npos);
  CHECK(text.out.find("Live at the peak") != std::string::npos);
  const Output json = headroom("simulate '" + plan + "' --json --events");
  REQUIRE(json.exit_code == 0);
  const nlohmann::json s = nlohmann::json::parse(json.out);
  CHECK(s.at("simulation").at("peak_reserved_bytes").get<int64_t>() >= s.at("simulation").at("peak_allocated_bytes").get<int64_t>());
  CHECK(s.at("simulation").at("events").size() > 10);
  const std::string broken = scratch("broken.json").string();
  std::ofstream(broken) << "{\"format\": \"headroom.plan\", \"version\": 1";
  const Output bad = headroom("simulate '" + broken + "'");
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("broken.json") != std::string::npos);
  const Output missing = headroom("simulate /nonexistent/plan.json");
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("/nonexistent/plan.json") != std::string::npos);
}

TEST_CASE("simulate replays steps until steady where the optimizer makes its states at its first step") {
  const std::string lazy = scratch("lazy_plan.json").string();
  REQUIRE(headroom("plan gpt2 --gpu a6000 --batch 4 --fixed-micro-batch --stack hf-trainer -o '" + lazy + "'").exit_code == 0);
  const Output text = headroom("simulate '" + lazy + "'");
  INFO(text.err);
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("makes its states at its first step()") != std::string::npos);
  const nlohmann::json s = nlohmann::json::parse(headroom("simulate '" + lazy + "' --json").out).at("simulation");
  CHECK(s.at("steps_simulated").get<int>() >= 2);
  CHECK(s.at("first_step_peak_allocated_bytes").get<int64_t>() < s.at("peak_allocated_bytes").get<int64_t>());
  // DeepSpeed makes its states before training: one step is the steady state.
  const std::string eager = scratch("eager_plan.json").string();
  REQUIRE(headroom("plan gpt2 --gpu a6000 --batch 4 --fixed-micro-batch --stack deepspeed -o '" + eager + "'").exit_code == 0);
  const Output eager_text = headroom("simulate '" + eager + "'");
  REQUIRE(eager_text.exit_code == 0);
  CHECK(eager_text.out.find("makes its states at its first step()") == std::string::npos);
  const nlohmann::json e = nlohmann::json::parse(headroom("simulate '" + eager + "' --json").out).at("simulation");
  CHECK(e.at("steps_simulated").get<int>() == 1);
  CHECK(e.at("first_step_peak_reserved_bytes").get<int64_t>() == e.at("peak_reserved_bytes").get<int64_t>());
}
