// Settings as every path reads them (issue 14): one validation with the
// documented maxima for flags, --settings files, DeepSpeed configs and plan
// files; no coercion (1.9, true, "4", 2^63); unknown keys named. A run that
// cannot exist is refused, never answered FITS.
#include "planner/settings/run_settings.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "planner/configs/deepspeed_import.h"
#include "planner/predict/model_context.h"
#include "planner/settings/settings_json.h"
#include "planner/settings/stack.h"

namespace headroom::planner {
namespace {

using nlohmann::json;

std::string refusal(const json& settings) {
  const Result<RunSettings> read = settings_from_json(settings, "s.json");
  return read.is_ok() ? "" : read.message();
}

json with(const char* key, const json& value) {
  json j = {{"model", "llama-3-8b"}, {"gpu", "h100"}, {"mode", "lora"}};
  j[key] = value;
  return j;
}

}  // namespace

TEST_CASE("the issue's reproducer: micro_batch 10^13 in a settings file is refused, not FITS with 0 B") {
  CHECK(refusal(with("micro_batch", 10000000000000LL)) ==
        "s.json: micro_batch: expected an integer from 1 to 1024, got 10000000000000");
}

TEST_CASE("the same micro-batch through a DeepSpeed config is refused by the same validation") {
  const Result<RunSettings> r =
      apply_deepspeed_config(json{{"train_micro_batch_size_per_gpu", 10000000000000LL}}, RunSettings{}, "ds.json");
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.message() == "ds.json: micro_batch: expected an integer from 1 to 1024, got 10000000000000");
}

TEST_CASE("every integer setting is held to its range, naming the field") {
  struct Case {
    const char* key;
    json value;
    const char* message;
  };
  const Case cases[] = {
      {"micro_batch", 0, "s.json: micro_batch: expected an integer from 1 to 1024, got 0"},
      {"micro_batch", -4, "s.json: micro_batch: expected an integer from 1 to 1024, got -4"},
      {"grad_accum", 0, "s.json: grad_accum: expected an integer from 1 to 1000000, got 0"},
      {"grad_accum", 1000001, "s.json: grad_accum: expected an integer from 1 to 1000000, got 1000001"},
      {"zero_stage", -1, "s.json: zero_stage: expected an integer from 0 to 3, got -1"},
      {"zero_stage", 7, "s.json: zero_stage: expected an integer from 0 to 3, got 7"},
      {"seq_len", 20000000, "s.json: seq_len: expected an integer from 0 to 16000000 (0: the model's default), got "
                            "20000000"},
      {"gpus_per_node", 65, "s.json: gpus_per_node: expected an integer from 1 to 64, got 65"},
      {"host_ram_bytes", 0, "s.json: host_ram_bytes: expected an integer from 1 to 1152921504606846976, got 0"},
      {"reduce_bucket_elements", 0, "s.json: reduce_bucket_elements: expected an integer from 1 to 1000000000000, got 0"},
      {"checkpoints_kept", 0, "s.json: checkpoints_kept: expected an integer from 1 to 1000, got 0"},
      {"safety_margin", 0.7, "s.json: safety_margin: expected a fraction in [0, 0.5), got 0.700000"},
      {"network_gbps", 0, "s.json: network_gbps: expected a bandwidth in GB/s above 0, at most 1000000, got 0.000000"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.key);
    CHECK(refusal(with(c.key, c.value)) == c.message);
  }
}

TEST_CASE("the product of micro-batch, accumulation and GPUs is bounded too") {
  json j = with("micro_batch", 1024);
  j["grad_accum"] = 1000000;
  j["gpus_per_node"] = 8;
  CHECK(refusal(j) == "s.json: grad_accum: expected micro_batch x grad_accum x GPUs at most 1000000000 samples per "
                      "step, got 1024 x 1000000 x 8 = 8192000000");
  json global = with("global_batch", 999999999);
  CHECK(refusal(global).find("s.json: global_batch: expected at most 1000000 accumulation steps") == 0);
}

TEST_CASE("no coercion: 1.9, true, a string and 2^63 are not integers, naming the key") {
  CHECK(refusal(with("micro_batch", 1.9)) == "s.json: settings.micro_batch: expected an integer (at most 2^63 - 1), got 1.9");
  CHECK(refusal(with("micro_batch", true)) == "s.json: settings.micro_batch: expected an integer (at most 2^63 - 1), got true");
  CHECK(refusal(with("grad_accum", "4")).find("s.json: settings.grad_accum: expected an integer") == 0);
  CHECK(refusal(with("micro_batch", json::parse("9223372036854775808"))) ==
        "s.json: settings.micro_batch: expected an integer (at most 2^63 - 1), got 9223372036854775808");
  CHECK(refusal(with("gpus_per_node", 4294967297LL)).find("s.json: settings.gpus_per_node: expected a 32-bit integer") ==
        0);
  CHECK(refusal(with("overlap_comm", 1)) == "s.json: settings.overlap_comm: expected true or false, got 1");
  CHECK(refusal(with("safety_margin", "5%")).find("s.json: settings.safety_margin: expected a number") == 0);
  CHECK(refusal(with("freeze_patterns", json::array({"a", 1}))).find("settings.freeze_patterns: expected a list of strings") !=
        std::string::npos);
  CHECK(refusal(with("dropout", nullptr)).find("settings.dropout: expected a number") != std::string::npos);
  CHECK(refusal(with("lora", {{"rank", 8.5}})).find("s.json: settings.lora.rank: expected an integer") == 0);
}

TEST_CASE("unknown keys are refused, naming the key and the nearest known one") {
  const std::string typo = refusal(with("micro_bach", 64));
  CHECK(typo.find("s.json: settings.micro_bach: unknown key (did you mean \"micro_batch\"? expected one of ") == 0);
  CHECK(refusal(with("lora", {{"rank", 8}, {"alpha", 16}})).find("s.json: settings.lora.alpha: unknown key") == 0);
  CHECK(refusal(with("colour", "blue")).find("s.json: settings.colour: unknown key (expected one of ") == 0);
  // Optional keys are known even when absent: a typo of one is named after it.
  CHECK(refusal(with("recompue", "block")).find("did you mean \"recompute\"?") != std::string::npos);
  CHECK(refusal(with("colour", "blue")).find("optimizer_impl") != std::string::npos);
}

TEST_CASE("sizes whose sum would leave int64 are out of range, though each tensor fits") {
  ModelContext context;
  for (int i = 0; i < 512; ++i) {
    graph::Tensor tensor;
    tensor.name = "t" + std::to_string(i);
    tensor.elements = graph::SizeExpr::per_token(int64_t{1} << 40);  // 2^40 per token, fp32
    context.graph.tensors.push_back(tensor);
  }
  CHECK(sizes_in_range(context, 1, 1));           // 512 x 2^40 x 4 B x 3 = 1.5 x 2^53 B
  CHECK_FALSE(sizes_in_range(context, 1024, 1));  // 1.5 x 2^63 B: refused, never summed into a wrap
  CHECK_FALSE(sizes_in_range(context, int64_t{1} << 40, int64_t{1} << 40));  // the tensor itself overflows
}

TEST_CASE("what settings_to_json writes, with every optional field set, reads back") {
  RunSettings s;
  s.optimizer_impl = OptimizerImpl::kFused;
  s.loss = LossSpec{LossImpl::kChunked, 4};
  s.dropout = 0.1;
  s.gpu_memory_bytes = int64_t{24} << 30;
  s.cuda_context_bytes = int64_t{500} << 20;
  s.calibration_file = "calibration.json";
  s.checkpointing = CheckpointPolicy::kList;
  s.checkpoint_blocks = {"layers.0"};
  s.attention = models::AttentionImpl::kFlex;
  s.document_tokens = 300;
  s.gpus_per_node = 8;
  s.shard_gpus = 4;
  s.text_tokens = 77;
  s.compile = true;
  s.compile_loss = false;
  const Result<RunSettings> back = settings_from_json(settings_to_json(s), "s.json");
  REQUIRE_MESSAGE(back.is_ok(), back.message());
  CHECK(settings_to_json(back.value()) == settings_to_json(s));
  CHECK(back->compile_loss == false);
}

TEST_CASE("compile_loss without compile is refused by name") {
  nlohmann::json j = settings_to_json(RunSettings{});
  j["compile_loss"] = true;
  const Result<RunSettings> bad = settings_from_json(j, "s.json");
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.message().find("s.json: compile_loss: only torch.compile compiles the loss") == 0);
}

TEST_CASE("each attention kernel reads back, another name is refused, naming the four") {
  for (models::AttentionImpl impl :
       {models::AttentionImpl::kEager, models::AttentionImpl::kSdpa, models::AttentionImpl::kFlex,
        models::AttentionImpl::kTritonFlash}) {
    RunSettings s;
    s.attention = impl;
    const Result<RunSettings> back = settings_from_json(settings_to_json(s), "s.json");
    REQUIRE_MESSAGE(back.is_ok(), back.message());
    CHECK(back->attention == impl);
  }
  nlohmann::json j = settings_to_json(RunSettings{});
  j["attention"] = "xformers";
  const Result<RunSettings> bad = settings_from_json(j, "s.json");
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.message().find("s.json: settings.attention: expected one of eager, sdpa, flex, triton") == 0);
}

}  // namespace headroom::planner
