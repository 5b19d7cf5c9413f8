// RoPE's caches as the stack decides them (planner/settings/stack.cc
// resolve_rope_modules; docs/models.md, "Rotary caches"): transformers before 4.45
// keeps cos/sin in every Qwen2 layer, torchtune an fp32 cache (one per layer in its
// lora_ builders), and an open transformers release leaves them in the band.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/settings/settings_json.h"
#include "planner/settings/stack.h"
#include "planner/settings/validate_settings.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

using models::RopeModules;

// The oracle's hf4 row hf-trainer[hf4]/qwen2.5-0.5b/lora/none/b1s512.
RunSettings qwen_trainer(const std::string& transformers) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/qwen2.5-0.5b";
  s.gpu = "h200";
  s.stack = Stack::kHfTrainer;
  s.precision = Precision::kBf16Pure;
  s.mode = TrainMode::kLora;
  s.lora.targets = {"q_proj", "v_proj"};
  s.micro_batch = 1;
  s.seq_len = 512;
  s.optimizer_impl = OptimizerImpl::kForeach;
  if (!transformers.empty()) REQUIRE(parse_versions("transformers=" + transformers, "test", s.versions).is_ok());
  return s;
}

}  // namespace

TEST_CASE("the transformers release decides transformers' rotary caches, and open, the band spans them") {
  CHECK(resolve_stack(qwen_trainer("4.44.2")).top.rope_modules == RopeModules::kTransformersCached);
  CHECK(resolve_stack(qwen_trainer("4.45.0")).top.rope_modules == RopeModules::kPerForward);
  const ResolvedStack open = resolve_stack(qwen_trainer(""));
  CHECK(open.top.rope_modules == RopeModules::kTransformersCached);
  CHECK(open.bottom.rope_modules == RopeModules::kPerForward);
  CHECK(open.layer_rope_caches_open);
  REQUIRE(bottom_of_band(qwen_trainer("")).has_value());
  CHECK(bottom_of_band(qwen_trainer(""))->layer_rope_caches == false);
  RunSettings pinned = qwen_trainer("");
  pinned.layer_rope_caches = false;
  CHECK_FALSE(resolve_stack(pinned).layer_rope_caches_open);
  CHECK(resolve_stack(pinned).top.rope_modules == RopeModules::kPerForward);
}

TEST_CASE("torchtune's rotary caches follow its builder: shared in full, per layer in lora_") {
  RunSettings tune = qwen_trainer("4.44.2");  // torchtune does not read the transformers release
  tune.stack = Stack::kTorchtune;
  CHECK(resolve_stack(tune).top.rope_modules == RopeModules::kTorchtuneLora);
  CHECK_FALSE(resolve_stack(tune).layer_rope_caches_open);
  tune.mode = TrainMode::kFull;
  CHECK(resolve_stack(tune).top.rope_modules == RopeModules::kTorchtune);
  tune.stack = Stack::kLitgpt;
  CHECK(resolve_stack(tune).top.rope_modules == RopeModules::kPerForward);
  tune.layer_rope_caches = true;
  const Status refused = validate_settings(tune, "f.json");
  CHECK(refused.message().find("layer_rope_caches") != std::string::npos);
}

TEST_CASE("layer_rope_caches reads and writes as the other mechanism overrides") {
  RunSettings s = qwen_trainer("");
  s.layer_rope_caches = true;
  const Result<RunSettings> back = settings_from_json(settings_to_json(s), "f.json");
  REQUIRE(back.is_ok());
  CHECK(back->layer_rope_caches == true);
}

TEST_CASE("Qwen2.5-0.5B holds its 48 rotary caches under transformers 4.44.2, none under 4.45") {
  // 24 layers x cos_cached and sin_cached of (32768, 64) bf16: 201,326,592 bytes,
  // resident, so at the peak too (the oracle's hf4 rows: -7.4% before them).
  const Prediction old = predict_as_given(qwen_trainer("4.44.2"));
  const Prediction recent = predict_as_given(qwen_trainer("4.45.0"));
  CHECK(old.allocated.parameters - recent.allocated.parameters == 201'326'592);
  // At the peak (the head, every layer's activations kept) besides them: each layer's own
  // cos and sin, [1, 512, 64] bf16, where 4.45's layers share one pair (models/rope_tables.h).
  CHECK(old.peak_allocated - recent.peak_allocated == 201'326'592 + (48 - 2) * 512 * 64 * 2);
}

TEST_CASE("torchtune's lora_qwen2 holds a cache in each of its 24 layers") {
  RunSettings lora = qwen_trainer("");
  lora.stack = Stack::kTorchtune;
  lora.optimizer_impl = OptimizerImpl::kFused;
  RunSettings shared = lora;
  shared.layer_rope_caches = false;  // the full builder's one cache, shared by the layers
  // Each fp32 (32768, 128): 16 MiB (the oracle's tt rows: `cat (32768, 128) float32 x24`),
  // against the one the full builder's layers share.
  CHECK(predict_as_given(lora).allocated.parameters - predict_as_given(shared).allocated.parameters ==
        23 * 16'777'216);
}

TEST_CASE("ZeRO-3 and FSDP leave the caches whole on every rank's GPU") {
  // Buffers are neither sharded nor offloaded (fully_shard moves them to the device;
  // DeepSpeed partitions module.parameters() only): 8 ranks hold 24 x 16 MiB each.
  RunSettings one = qwen_trainer("");
  one.stack = Stack::kTorchtune;
  one.optimizer_impl = OptimizerImpl::kFused;
  RunSettings none = one;
  none.layer_rope_caches = false;
  for (RunSettings* s : {&one, &none}) {
    s->gpus_per_node = 8;
    s->zero_stage = 3;
  }
  CHECK(predict_as_given(one).allocated.parameters - predict_as_given(none).allocated.parameters ==
        23 * 16'777'216);
  for (RunSettings* s : {&one, &none}) {
    s->offload_param = Offload::kCpu;
    s->offload_optimizer = Offload::kCpu;
    s->host_ram_bytes = int64_t{1} << 40;
  }
  CHECK(predict_as_given(one).allocated.parameters == 24 * 16'777'216);
}

TEST_CASE("the band names the release only for a model whose layers cache") {
  const auto unknowns = [](RunSettings s) {
    const Result<FitAnswer> answer = fit(s);
    REQUIRE(answer.is_ok());
    return answer->as_given.prediction.band_unknowns;
  };
  const auto names_caches = [](const std::vector<std::string>& lines) {
    return std::any_of(lines.begin(), lines.end(),
                       [](const std::string& line) { return line == layer_rope_caches_unknown(); });
  };
  CHECK(names_caches(unknowns(qwen_trainer(""))));
  CHECK_FALSE(names_caches(unknowns(qwen_trainer("4.44.2"))));
  RunSettings llama = qwen_trainer("");
  llama.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b";
  CHECK_FALSE(names_caches(unknowns(llama)));
}

}  // namespace headroom::planner
