// The search's kept contexts (search/plan_contexts.h): one per context key, shared by
// plans that differ only in fields no context reads (the offloads), prepared again
// for any keyed field; their kept profiles price as predict() does; and fits_at,
// which stops at the first configuration that fits, answers as the whole search.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "planner/predict/prediction.h"
#include "planner/search/candidate_search.h"
#include "planner/search/plan_contexts.h"
#include "planner/settings/settings_json.h"

namespace headroom::planner {
namespace {

using nlohmann::json;

RunSettings settings_of(const json& fields) {
  Result<RunSettings> settings = settings_from_json(fields, "test");
  REQUIRE_MESSAGE(settings.is_ok(), settings.message());
  return settings.value();
}

// A two-GPU full fine-tune, where every ZeRO stage and offload is open, on 2.5 GiB:
// stage 0 fits no micro-batch, sharding fits some.
RunSettings sharded_gpt2() {
  return settings_of({{"model", "gpt2"}, {"gpu", "4090"}, {"gpu_memory_bytes", 5LL << 29}, {"gpus_per_node", 2},
                      {"mode", "full"}, {"seq_len", 512}, {"precision", "bf16-mixed"}, {"global_batch", 8}});
}

RunSettings plan_at(int zero_stage, Offload optimizer, Offload param, int64_t micro_batch) {
  GlobalConfig config;
  config.zero_stage = zero_stage;
  config.offload_optimizer = optimizer;
  config.offload_param = param;
  config.micro_batch = micro_batch;
  config.grad_accum = 4 / micro_batch;
  return plan_settings_for(sharded_gpt2(), config);
}

}  // namespace

TEST_CASE("a kept context is returned for equal settings and for settings that differ only in their offloads") {
  PlanContexts contexts;
  const PricedContext* first = contexts.context_for(plan_at(3, Offload::kNone, Offload::kNone, 2));
  REQUIRE(first != nullptr);
  CHECK(contexts.context_for(plan_at(3, Offload::kNone, Offload::kNone, 2)) == first);
  CHECK(contexts.context_for(plan_at(3, Offload::kCpu, Offload::kCpu, 2)) == first);
  CHECK(contexts.context_for(plan_at(3, Offload::kCpu, Offload::kNone, 2)) == first);
  CHECK(contexts.prepared() == 1);
}

TEST_CASE("a changed micro-batch, ZeRO stage or precision prepares its own context") {
  PlanContexts contexts;
  const PricedContext* first = contexts.context_for(plan_at(3, Offload::kNone, Offload::kNone, 2));
  REQUIRE(first != nullptr);
  RunSettings one_sample = plan_at(3, Offload::kNone, Offload::kNone, 2);
  one_sample.micro_batch = 1;  // the accumulation unchanged
  const PricedContext* other_batch = contexts.context_for(one_sample);
  REQUIRE(other_batch != nullptr);
  CHECK(other_batch != first);
  CHECK(other_batch->micro_batch == 1);
  CHECK(other_batch->profile.blocks.front().keep < first->profile.blocks.front().keep);
  const PricedContext* other_stage = contexts.context_for(plan_at(2, Offload::kNone, Offload::kNone, 2));
  CHECK(other_stage != first);
  RunSettings fp16 = plan_at(3, Offload::kNone, Offload::kNone, 2);
  fp16.precision = Precision::kFp16Mixed;
  const PricedContext* other_precision = contexts.context_for(fp16);
  CHECK(other_precision != first);
  CHECK(contexts.prepared() == 4);
}

TEST_CASE("settings refused only for their offloads get no context though their key is kept") {
  PlanContexts contexts;
  REQUIRE(contexts.context_for(plan_at(2, Offload::kNone, Offload::kNone, 2)) != nullptr);
  // Parameter offload needs ZeRO-3 (validate_settings): refused as prepare_context refuses it.
  CHECK(contexts.context_for(plan_at(2, Offload::kNone, Offload::kCpu, 2)) == nullptr);
  CHECK_FALSE(prepare_context(plan_at(2, Offload::kNone, Offload::kCpu, 2)).is_ok());
}

TEST_CASE("a prediction with the kept profiles is the one predict makes") {
  PlanContexts contexts;
  const RunSettings settings = plan_at(3, Offload::kCpu, Offload::kCpu, 2);
  const PricedContext* priced = contexts.context_for(settings);
  REQUIRE(priced != nullptr);
  const GlobalConfig config = user_config(settings);
  const std::vector<BlockChoice> blocks(priced->context.graph.blocks.size(), BlockChoice::kKeep);
  for (int twice = 0; twice < 2; ++twice) {  // the allocated profile made, then kept
    const Prediction kept = predict_in(*priced, settings, config, blocks);
    const Prediction fresh = predict(priced->context, settings, config, blocks);
    CHECK(kept.gpu_total == fresh.gpu_total);
    CHECK(kept.peak_reserved == fresh.peak_reserved);
    CHECK(kept.peak_allocated == fresh.peak_allocated);
    CHECK(kept.allocated.activations == fresh.allocated.activations);
    CHECK(kept.time.step_ms == fresh.time.step_ms);
  }
  REQUIRE(priced->allocated.has_value());
  // At another micro-batch the kept profiles do not apply: predicted afresh.
  GlobalConfig other = config;
  other.micro_batch = 1;
  other.grad_accum = 4;
  CHECK(predict_in(*priced, settings, other, blocks).gpu_total == predict(priced->context, settings, other, blocks).gpu_total);
}

TEST_CASE("fits_at, stopping at the first configuration that fits, answers as the whole search") {
  const RunSettings settings = sharded_gpt2();
  const Result<ModelContext> base = prepare_context(settings);
  REQUIRE(base.is_ok());
  int fitting = 0;
  for (int64_t mb : {1, 2, 4, 8}) {
    const RunSettings probe = fits_at_probe(base.value(), settings, mb, base->seq_len);
    PlanContexts contexts;
    const bool found =
        search_candidates(contexts, probe, search_options(base.value(), probe, {mb}), nullptr, nullptr, {}).found;
    CHECK_MESSAGE(fits_at(base.value(), settings, mb, base->seq_len) == found, "micro-batch " << mb);
    fitting += found;
  }
  CHECK(fitting > 0);
  CHECK(fitting < 4);
}

}  // namespace headroom::planner
