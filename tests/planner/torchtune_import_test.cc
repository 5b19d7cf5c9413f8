// torchtune recipe configs (planner/configs/torchtune_import.h): the published configs in
// tests/data/torchtune map onto the settings their recipes run with, predict as
// the equivalent flags do, and what cannot be read is refused by name.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "graph/graph_json.h"
#include "models/hf_import.h"
#include "models/torchtune_models.h"
#include "planner/configs/torchtune_import.h"
#include "tests/planner/predict_as_given.h"
#include "planner/settings/settings_json.h"

namespace headroom::planner {
namespace {

const std::string kData = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/torchtune/";

ConfigImport imported(const std::string& file, const std::vector<std::string>& overrides = {}) {
  RunSettings base;
  base.gpu = "a100-80g";
  Result<ConfigImport> out = load_torchtune_config(kData + file, overrides, base);
  REQUIRE_MESSAGE(out.is_ok(), out.message());
  return out.value();
}

bool listed(const std::vector<std::string>& keys, const std::string& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

std::string refusal(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  Result<ConfigImport> out = import_torchtune_config(yaml, "c.yaml", overrides, RunSettings{});
  REQUIRE_FALSE(out.is_ok());
  return out.message();
}

constexpr const char* kMinimal =
    "batch_size: 1\nmodel:\n  _component_: torchtune.models.llama3_2.llama3_2_1b\ntokenizer:\n  max_seq_len: 2048\n"
    "optimizer:\n  _component_: torch.optim.AdamW\n";

}  // namespace

TEST_CASE("llama3_2/3B_full_single_device: every memory key read, every other key listed as ignored") {
  // The README's optimization rows pack to 4096 tokens: the same config with two overrides.
  const ConfigImport tt =
      imported("llama3_2_3B_full_single_device.yaml", {"tokenizer.max_seq_len=4096", "dataset.packed=True"});
  const RunSettings& s = tt.settings;
  CHECK(s.model == "torchtune.models.llama3_2.llama3_2_3b");
  CHECK(s.stack == Stack::kTorchtune);
  CHECK(s.mode == TrainMode::kFull);
  CHECK(s.precision == Precision::kBf16Pure);
  CHECK(s.optimizer == OptimizerKind::kAdamW8bit);
  CHECK(s.paged_optimizer);  // bitsandbytes.optim.PagedAdamW8bit
  CHECK(s.optimizer_impl == OptimizerImpl::kInBackward);
  CHECK(s.loss == LossSpec{LossImpl::kChunked, 8});
  CHECK(s.checkpointing == CheckpointPolicy::kEveryBlock);
  CHECK_FALSE(s.offload_checkpoint_inputs);
  CHECK_FALSE(s.compile);
  CHECK(s.micro_batch == 4);
  CHECK(s.grad_accum == 1);
  CHECK(s.seq_len == 4096);
  CHECK(s.attention == models::AttentionImpl::kFlex);  // packed rows: flex with the document mask
  CHECK(s.gpu == "a100-80g");                           // what the config cannot say comes from the base
  CHECK_FALSE(tt.sequence_unknown);
  for (const char* key : {"checkpointer", "optimizer.lr", "profiler", "metric_logger", "tokenizer.path", "seed"}) {
    CHECK_MESSAGE(listed(tt.ignored, key), key);
  }
  for (const char* key : {"batch_size", "optimizer._component_", "model._component_", "dataset.packed", "dtype",
                          "optimizer_in_bwd", "enable_activation_checkpointing"}) {
    CHECK_MESSAGE(!listed(tt.ignored, key), key);
  }

  // As published (max_seq_len null, not packed) the padded length is unknown.
  CHECK(imported("llama3_2_3B_full_single_device.yaml").sequence_unknown);
}

TEST_CASE("a torchtune config predicts as the equivalent flags do") {
  const ConfigImport tt =
      imported("llama3_2_3B_full_single_device.yaml", {"tokenizer.max_seq_len=4096", "dataset.packed=True"});
  RunSettings flags;
  flags.model = "torchtune.models.llama3_2.llama3_2_3b";
  flags.gpu = "a100-80g";
  flags.stack = Stack::kTorchtune;
  flags.precision = Precision::kBf16Pure;
  flags.optimizer = OptimizerKind::kAdamW8bit;
  flags.paged_optimizer = true;
  flags.optimizer_impl = OptimizerImpl::kInBackward;
  flags.loss = LossSpec{LossImpl::kChunked, 8};
  flags.checkpointing = CheckpointPolicy::kEveryBlock;
  flags.micro_batch = 4;
  flags.seq_len = 4096;
  flags.attention = models::AttentionImpl::kFlex;
  CHECK(settings_to_json(tt.settings) == settings_to_json(flags));
  const Prediction from_config = predict_as_given(tt.settings);
  const Prediction from_flags = predict_as_given(flags);
  CHECK(from_config.peak_allocated == from_flags.peak_allocated);
  CHECK(from_config.time.step_ms == from_flags.time.step_ms);
}

TEST_CASE("llama3_2/3B_lora_single_device: torchtune's module names become the graph's LoRA targets") {
  const ConfigImport tt = imported("llama3_2_3B_lora_single_device.yaml", {"tokenizer.max_seq_len=2048"});
  const RunSettings& s = tt.settings;
  CHECK(s.mode == TrainMode::kLora);
  CHECK(s.lora.targets ==
        std::vector<std::string>{"q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"});
  CHECK(s.lora.rank == 64);
  CHECK(s.lora.dropout == 0.0);
  CHECK(s.optimizer == OptimizerKind::kAdamW);
  CHECK(s.optimizer_impl == OptimizerImpl::kFused);  // fused: True
  CHECK(s.grad_accum == 8);
  CHECK(s.attention == models::AttentionImpl::kSdpa);  // not packed
  CHECK(listed(tt.ignored, "lr_scheduler"));
  CHECK_FALSE(listed(tt.ignored, "optimizer.fused"));
  CHECK(listed(tt.ignored, "optimizer.weight_decay"));
  CHECK_FALSE(listed(tt.ignored, "model.lora_alpha"));  // read: a scale, no bytes
  // The qlora_ builder of the same model quantizes the base.
  const ConfigImport q = imported("llama3_2_3B_lora_single_device.yaml",
                                     {"tokenizer.max_seq_len=2048",
                                      "model._component_=torchtune.models.llama3_2.qlora_llama3_2_3b"});
  CHECK(q.settings.mode == TrainMode::kQlora);
  REQUIRE_MESSAGE(predict_as_given(q.settings).peak_allocated < predict_as_given(s).peak_allocated, "4-bit base");
}

TEST_CASE("torchtune's Llama 3.2 1B builder is transformers' Llama-3.2-1B config.json graph") {
  Result<graph::LayerGraph> builder = models::build_torchtune_model("torchtune.models.llama3_2.llama3_2_1b", {});
  Result<models::HfModel> hf =
      models::load_hf_model(std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b", {});
  REQUIRE(builder.is_ok());
  REQUIRE(hf.is_ok());
  graph::LayerGraph a = builder.value();
  graph::LayerGraph b = hf->graph;
  a.name = b.name;
  a.family = b.family;
  a.description = b.description;
  a.source = b.source;
  a.sequence = b.sequence;
  CHECK(graphs_equal(a, b));
  CHECK(a.parameter_count() == 1'235'814'400);
}

TEST_CASE("what a torchtune config cannot say, or says wrongly, is refused by name") {
  CHECK(refusal("model:\n  _component_: torchtune.models.llama3_2.llama3_2_2b\n")
            .find("c.yaml: model._component_: expected a torchtune model builder headroom knows") == 0);
  CHECK(refusal(std::string(kMinimal) + "dtype: fp16\n").find("c.yaml: dtype: expected bf16 or fp32") == 0);
  CHECK(refusal(kMinimal, {"batch_size=four"}).find("c.yaml: batch_size: expected a positive whole") == 0);
  CHECK(refusal(std::string(kMinimal) + "batch_size: 2\nbatch_size: 4\n")
            .find("c.yaml: line 8, column 1: batch_size: the key is given twice") == 0);
  CHECK(refusal(std::string(kMinimal), {"optimizer._component_=torch.optim.Adagrad"})
            .find("c.yaml: optimizer._component_: expected torch.optim.AdamW") == 0);
  CHECK(refusal(std::string(kMinimal), {"~optimizer"}).find("c.yaml: optimizer._component_: expected") == 0);
  CHECK(refusal(std::string(kMinimal) + "optimizer_in_bwd: True\ngradient_accumulation_steps: 4\n")
            .find("c.yaml: optimizer_in_bwd: expected false with gradient_accumulation_steps above 1") == 0);
  CHECK(refusal(std::string(kMinimal) + "device: cpu\n").find("c.yaml: device: expected cuda") == 0);
  CHECK(refusal("model: [unclosed\n").find("c.yaml: line 2, column 1: ") == 0);
  CHECK(refusal(kMinimal, {"batch_size"}).find("c.yaml: override \"batch_size\": expected KEY=VALUE") == 0);
  CHECK(refusal(std::string(kMinimal) + "enable_activation_offloading: True\n")
            .find("c.yaml: enable_activation_offloading: expected false without enable_activation_checkpointing") == 0);
  // Text that is not UTF-8 is refused before yaml-cpp sees it (",\x97\xff" hung its parser).
  CHECK(refusal(std::string(",\x97\xff", 3)).find("c.yaml: byte 1: expected UTF-8 text") == 0);
  CHECK(refusal(std::string("a: \0b", 5)).find("c.yaml: byte 3: a control character") == 0);  // a NUL hung it too
  // A flow collection left open (it hung yaml-cpp 0.7, found by fuzzing) is a syntax error with its place.
  CHECK(refusal("model: [unclosed\n").find("c.yaml: line ") == 0);
  // Aliases are refused: one that refers into its own anchor is a cycle.
  CHECK(refusal(std::string(kMinimal) + "x: &a [1, *a]\n").find("c.yaml: line 8, column 11: an alias") == 0);
  CHECK(refusal(std::string(kMinimal) + "x: &a [1, *a]\n").find("an alias") != std::string::npos);
  // A tag a safe YAML loader refuses is refused on any key, read or not; the core
  // schema's !!str is a string.
  CHECK(refusal(std::string(kMinimal) + "x: !!python/object/apply:os.system [ls]\n")
            .find("c.yaml: line 8, column 4: a YAML tag (tag:yaml.org,2002:python/object/apply:os.system)") == 0);
  CHECK(refusal(std::string(kMinimal) + "!!python/name:os.system x: 1\n").find("a YAML tag") != std::string::npos);
  Result<ConfigImport> tagged_str = import_torchtune_config(std::string(kMinimal) + "dtype: !!str bf16\n", "c.yaml", {}, RunSettings{});
  CHECK_MESSAGE(tagged_str.is_ok(), tagged_str.message());
  // Llama 3.2 ties the output to the embeddings: torchtune refuses a LoRA output then.
  CHECK(refusal("model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_1b\n  lora_attn_modules: [q_proj]\n"
                "  apply_lora_to_output: True\ntokenizer:\n  max_seq_len: 512\noptimizer:\n  _component_: torch.optim.AdamW\n")
            .find("c.yaml: model.apply_lora_to_output: expected false") == 0);
  CHECK(refusal(std::string(kMinimal) + "model:\n  lora_dropout: .nan\n").find("given twice") != std::string::npos);
  Result<ConfigImport> nan = load_torchtune_config(
      kData + "llama3_2_3B_lora_single_device.yaml", {"tokenizer.max_seq_len=512", "model.lora_dropout=.nan"}, {});
  REQUIRE_FALSE(nan.is_ok());
  CHECK(nan.message().find("model.lora_dropout: expected a number, got \".nan\"") != std::string::npos);
  // ~KEY removes a key, as torchtune's command line does.
  // The recipes have no default batch_size: without one (or null) torchtune stops.
  CHECK(refusal(kMinimal, {"~batch_size"}).find("c.yaml: batch_size: expected a positive whole number "
                                                "(torchtune's recipes have no default)") == 0);
  CHECK(refusal(kMinimal, {"batch_size=null"}).find("c.yaml: batch_size: expected") == 0);
  Result<ConfigImport> set = import_torchtune_config(kMinimal, "c.yaml", {"batch_size=8"}, RunSettings{});
  REQUIRE(set.is_ok());
  CHECK(set->settings.micro_batch == 8);
}

TEST_CASE("the distributed recipes' FSDP keys: FSDP2 sharding, CPU offload, no reshard after forward") {
  const std::string distributed = std::string(kMinimal) + "fsdp_cpu_offload: True\n";
  Result<ConfigImport> offload = import_torchtune_config(distributed, "c.yaml", {}, RunSettings{});
  REQUIRE_MESSAGE(offload.is_ok(), offload.message());
  CHECK(offload->settings.zero_stage == 3);
  CHECK(offload->settings.offload_param == Offload::kCpu);
  CHECK(offload->settings.offload_optimizer == Offload::kCpu);
  Result<ConfigImport> no_reshard = import_torchtune_config(
      std::string(kMinimal) + "fsdp_cpu_offload: False\nfsdp_reshard_after_forward: False\n", "c.yaml", {},
      RunSettings{});
  REQUIRE(no_reshard.is_ok());
  CHECK(no_reshard->settings.zero_stage == 2);
}

}  // namespace headroom::planner
