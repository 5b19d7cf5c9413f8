// Importing DeepSpeed configs: the configs of the DeepSpeed tutorial in
// shared/seeds/003 (ZeRO-2 with 3e8 buckets, ZeRO-3 with CPU offload of
// optimizer and parameters, NVMe offload), xtuner's ZeRO-2 offload config with
// "auto" values, and the configs DeepSpeed refuses.
#include "planner/configs/deepspeed_import.h"

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace headroom::planner {
namespace {

std::string data(const std::string& name) {
  return std::string(HEADROOM_SOURCE_DIR) + "/tests/data/deepspeed/" + name;
}

RunSettings base_settings(int gpus) {
  RunSettings base;
  base.model = "gpt2";
  base.gpus_per_node = gpus;
  base.micro_batch = 3;
  base.grad_accum = 5;
  base.precision = Precision::kFp16Mixed;
  base.zero_stage = 1;
  base.reduce_bucket_elements = 123;
  return base;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The error of `config` applied to a 1-GPU base, checked to name `key_path`.
std::string error_of(const nlohmann::json& config, const std::string& key_path) {
  Result<RunSettings> r = apply_deepspeed_config(config, base_settings(1), "ds.json");
  REQUIRE_FALSE(r.is_ok());
  CHECK_MESSAGE(contains(r.message(), "ds.json: " + key_path), r.message());
  return r.message();
}

}  // namespace

TEST_CASE("the tutorial's ZeRO-2 config: 3e8 buckets, bf16, 8 x 1 x 2 GPUs = 16") {
  Result<RunSettings> r = load_deepspeed_config(data("zero2_seed.json"), base_settings(2));
  REQUIRE_MESSAGE(r.is_ok(), r.message());
  const RunSettings& s = r.value();
  CHECK(s.zero_stage == 2);
  CHECK(s.offload_optimizer == Offload::kNone);
  CHECK(s.offload_param == Offload::kNone);
  CHECK(s.reduce_bucket_elements == 300'000'000);
  CHECK(s.allgather_bucket_elements == 300'000'000);
  CHECK(s.prefetch_bucket_elements == 50'000'000);  // absent: DeepSpeed's default
  CHECK(s.overlap_comm);
  CHECK(s.precision == Precision::kBf16Mixed);
  CHECK(s.optimizer == OptimizerKind::kAdamW);  // "Adam" with adam_w_mode
  CHECK(s.micro_batch == 8);
  CHECK(s.grad_accum == 1);
  CHECK(s.effective_global_batch() == 16);
}

TEST_CASE("the same config on one GPU is refused: 16 != 8 x 1 x 1") {
  Result<RunSettings> r = load_deepspeed_config(data("zero2_seed.json"), base_settings(1));
  REQUIRE_FALSE(r.is_ok());
  CHECK(contains(r.message(), "zero2_seed.json: train_batch_size: expected"));
  CHECK(contains(r.message(), "8 x 1 x 1 = 8, got 16"));
}

TEST_CASE("the tutorial's ZeRO-3 offload config: optimizer and parameters on the CPU") {
  Result<RunSettings> r = load_deepspeed_config(data("zero3_offload_seed.json"), base_settings(2));
  REQUIRE_MESSAGE(r.is_ok(), r.message());
  const RunSettings& s = r.value();
  CHECK(s.zero_stage == 3);
  CHECK(s.offload_optimizer == Offload::kCpu);
  CHECK(s.offload_param == Offload::kCpu);
  CHECK(s.reduce_bucket_elements == 1'000'000);
  CHECK(s.prefetch_bucket_elements == 4'000'000);
  CHECK(s.max_live_parameters == 1'000'000'000);
  CHECK(s.allgather_bucket_elements == 500'000'000);
  CHECK(s.precision == Precision::kBf16Mixed);
  CHECK(s.micro_batch == 8);
}

TEST_CASE("xtuner-style ZeRO-2 offload with auto values keeps the base's batch and precision") {
  Result<RunSettings> r = load_deepspeed_config(data("zero2_offload_auto.json"), base_settings(4));
  REQUIRE_MESSAGE(r.is_ok(), r.message());
  const RunSettings& s = r.value();
  CHECK(s.zero_stage == 2);
  CHECK(s.offload_optimizer == Offload::kCpu);
  CHECK(s.micro_batch == 3);
  CHECK(s.grad_accum == 5);
  CHECK(s.effective_global_batch() == 60);
  CHECK(s.precision == Precision::kFp16Mixed);  // both "auto": the base's
  CHECK(s.reduce_bucket_elements ==
        500'000'000);            // absent: DeepSpeed's default, not the base's 123
  CHECK(s.max_zero_stage == 3);  // the planner's freedoms are untouched
}

TEST_CASE("NVMe offload at stage 3, fp16, micro-batch 1 x 16") {
  Result<RunSettings> r = load_deepspeed_config(data("zero3_nvme.json"), base_settings(1));
  REQUIRE_MESSAGE(r.is_ok(), r.message());
  CHECK(r->offload_optimizer == Offload::kNvme);
  CHECK(r->offload_param == Offload::kNvme);
  CHECK(r->precision == Precision::kFp16Mixed);
  CHECK(r->overlap_comm);  // absent at stage 3: DeepSpeed turns it on
  CHECK(r->grad_accum == 16);
}

TEST_CASE("absent keys take DeepSpeed's defaults") {
  Result<RunSettings> r = apply_deepspeed_config(
      nlohmann::json{{"train_micro_batch_size_per_gpu", 2}}, base_settings(2), "ds.json");
  REQUIRE_MESSAGE(r.is_ok(), r.message());
  CHECK(r->zero_stage == 0);
  CHECK(r->precision == Precision::kFp32);  // neither bf16 nor fp16: fp32
  CHECK(r->grad_accum == 1);                // micro-batch alone: one step
  CHECK(r->micro_batch == 2);

  r = apply_deepspeed_config(nlohmann::json{{"train_batch_size", 32},
                                            {"gradient_accumulation_steps", 4},
                                            {"zero_optimization", {{"stage", 2}}}},
                             base_settings(2), "ds.json");
  REQUIRE_MESSAGE(r.is_ok(), r.message());
  CHECK(r->micro_batch == 4);    // 32 / 2 GPUs / 4 steps
  CHECK_FALSE(r->overlap_comm);  // absent below stage 3: off

  r = apply_deepspeed_config(
      nlohmann::json{{"train_batch_size", 32}, {"train_micro_batch_size_per_gpu", 4}},
      base_settings(2), "ds.json");
  REQUIRE(r.is_ok());
  CHECK(r->grad_accum == 4);

  r = apply_deepspeed_config(nlohmann::json{{"zero_optimization", true}}, base_settings(1),
                             "ds.json");
  REQUIRE(r.is_ok());
  CHECK(r->zero_stage == 1);   // the deprecated boolean form
  CHECK(r->micro_batch == 3);  // no batch key at all: the base's
}

TEST_CASE("the configs DeepSpeed refuses are refused, naming file and key") {
  struct Case {
    const char* file;
    const char* key_path;
    const char* what;
  };
  const Case cases[] = {
      {"bad_batch.json", "train_batch_size", "4 x 2 x 1 = 8, got 16"},
      {"bad_offload_param_stage2.json", "zero_optimization.offload_param.device",
       "needs zero_optimization.stage 3"},
      {"bad_nvme_stage2.json", "zero_optimization.offload_optimizer.device", "NVMe"},
      {"bad_device.json", "zero_optimization.offload_optimizer.device",
       "expected \"none\", \"cpu\" or \"nvme\""},
      {"bad_stage.json", "zero_optimization.stage", "expected 0, 1, 2 or 3, got 4"},
      {"bad_both_precisions.json", "bf16.enabled", "got both"},
      {"bad_fractional_bucket.json", "zero_optimization.reduce_bucket_size", "got 1.5"},
      {"bad_stage_type.json", "zero_optimization.stage", "expected an integer"},
      {"bad_unknown_key.json", "zero_optimization.offload_optimiser", "unknown key"},
      {"bad_duplicate_key.json", "zero_optimization.stage", "duplicate key"},
      {"bad_truncated.json", "invalid JSON at byte", ""},
  };
  for (const Case& c : cases) {
    Result<RunSettings> r = load_deepspeed_config(data(c.file), base_settings(1));
    INFO(c.file);
    REQUIRE_FALSE(r.is_ok());
    CHECK_MESSAGE(contains(r.message(), std::string(c.file) + ": " + c.key_path), r.message());
    CHECK_MESSAGE(contains(r.message(), c.what), r.message());
  }
}

TEST_CASE("malformed and hostile values") {
  using nlohmann::json;
  error_of(json::array(), "(top level)");
  error_of(json{{"zero_optimization", 2}}, "zero_optimization");
  error_of(json{{"zero_optimization", {{"stage", -1}}}}, "zero_optimization.stage");
  error_of(json{{"zero_optimization", {{"stage", 1e300}}}}, "zero_optimization.stage");
  error_of(json{{"zero_optimization", {{"stage", true}}}}, "zero_optimization.stage");
  error_of(json{{"zero_optimization", {{"reduce_bucket_size", 0}}}},
           "zero_optimization.reduce_bucket_size");
  error_of(json{{"zero_optimization", {{"reduce_bucket_size", 18446744073709551615ULL}}}},
           "zero_optimization.reduce_bucket_size");
  error_of(json{{"zero_optimization", {{"overlap_comm", "yes"}}}},
           "zero_optimization.overlap_comm");
  error_of(json{{"zero_optimization", {{"stage", 2}, {"offload_optimizer", {{"device", 3}}}}}},
           "zero_optimization.offload_optimizer.device");
  error_of(json{{"zero_optimization", {{"stage", 2}, {"offload_optimizer", "cpu"}}}},
           "zero_optimization.offload_optimizer");
  error_of(json{{"zero_optimization", {{"stage", 0}, {"offload_optimizer", {{"device", "cpu"}}}}}},
           "zero_optimization.offload_optimizer.device");
  error_of(json{{"bf16", {{"enabled", 1}}}}, "bf16.enabled");
  error_of(json{{"fp16", true}}, "fp16");
  error_of(json{{"train_micro_batch_size_per_gpu", 0}}, "train_micro_batch_size_per_gpu");
  error_of(json{{"train_batch_size", 1}, {"gradient_accumulation_steps", 2}}, "train_batch_size");
  error_of(json{{"optimizer", {{"type", 7}}}}, "optimizer.type");
  CHECK_FALSE(load_deepspeed_config(data("no_such_file.json"), base_settings(1)).is_ok());
}

TEST_CASE("hostile files: deep nesting, numbers past a double, a FIFO (issue 14)") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("headroom_ds_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = (dir / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  };
  SUBCASE("60000 nested arrays: refused, not a stack overflow") {
    const std::string path = write("deep.json", std::string(60000, '[') + std::string(60000, ']'));
    Result<RunSettings> r = load_deepspeed_config(path, base_settings(1));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.message() == path + ": JSON nested deeper than 64 levels (expected a flatter file)");
  }
  SUBCASE("1e400 names the file and the key") {
    const std::string path = write("big.json", R"({"train_micro_batch_size_per_gpu": 1e400})");
    Result<RunSettings> r = load_deepspeed_config(path, base_settings(1));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.message().find(path + ": train_micro_batch_size_per_gpu: number overflow: 1e400") == 0);
  }
  SUBCASE("a FIFO is refused at once, not read forever") {
    const std::string path = (dir / "fifo.json").string();
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    Result<RunSettings> r = load_deepspeed_config(path, base_settings(1));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.message() == path + ": is a FIFO (expected a regular file)");
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("\"auto\" keeps the base, explicit values replace it") {
  using nlohmann::json;
  RunSettings base = base_settings(1);
  base.zero_stage = 3;
  base.offload_param = Offload::kCpu;
  base.max_live_parameters = 77;
  Result<RunSettings> r = apply_deepspeed_config(
      json{{"zero_optimization",
            {{"stage", "auto"}, {"offload_param", "auto"}, {"stage3_max_live_parameters", "auto"}}},
           {"train_batch_size", "auto"}},
      base, "ds.json");
  REQUIRE_MESSAGE(r.is_ok(), r.message());
  CHECK(r->zero_stage == 3);
  CHECK(r->offload_param == Offload::kCpu);
  CHECK(r->max_live_parameters == 77);
  CHECK(r->micro_batch == 3);
  CHECK(r->grad_accum == 5);

  r = apply_deepspeed_config(
      json{{"zero_optimization", {{"stage", 3}, {"max_live_parameters", 5e7}, {"sub_group_size", 2e8}}},
           {"bfloat16", {{"enabled", true}}}},
      base, "ds.json");
  REQUIRE_MESSAGE(r.is_ok(), r.message());
  CHECK(r->max_live_parameters == 50'000'000);  // the field name works like the stage3_ alias
  CHECK(r->sub_group_elements == 200'000'000);
  CHECK(r->precision == Precision::kBf16Mixed);
  CHECK(r->offload_param == Offload::kNone);  // absent: none
}

}  // namespace headroom::planner
