// The run's library releases (planner/settings/versions.h, planner/configs/pip_freeze.h)
// and what they decide in the stack (planner/settings/stack.cc): the Trainer's loss and
// default optimizer, SDPA over grouped K/V (repeat_kv), PEFT's adapter dtype. Sources
// are cited in docs/stacks.md, "Releases".
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "planner/configs/pip_freeze.h"
#include "planner/settings/settings_json.h"
#include "planner/settings/stack.h"
#include "planner/settings/versions.h"
#include "tests/planner/predict_as_given.h"
#include "tests/support/temp_dir.h"

namespace headroom::planner {
namespace {

RunSettings trainer_run(const std::string& transformers) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b";
  s.gpu = "h200";
  s.stack = Stack::kHfTrainer;
  s.precision = Precision::kBf16Pure;
  s.micro_batch = 1;
  s.seq_len = 512;
  if (!transformers.empty()) REQUIRE(parse_versions("transformers=" + transformers, "test", s.versions).is_ok());
  return s;
}

int count_op(const graph::LayerGraph& graph, const std::string& op) {
  int count = 0;
  for (const graph::Node& node : graph.nodes) count += node.op == op;
  return count;
}

}  // namespace

TEST_CASE("releases parse as PEP 440 orders their first three numbers") {
  CHECK(parse_release("4.44.2") == Release{4, 44, 2});
  CHECK(parse_release("4.49") == Release{4, 49, 0});
  CHECK(parse_release("2.8.0+cu128") == Release{2, 8, 0});
  CHECK(parse_release("4.57.0.dev0") == Release{4, 57, 0});
  CHECK(parse_release("0.43.0rc1") == Release{0, 43, 0});
  CHECK(parse_release("5") == Release{5, 0, 0});
  for (const char* bad : {"", "x", "4.", "4.x", "-1.2", "4.4-", ".4"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_release(bad).has_value());
  }
  CHECK(*parse_release("4.53.9") < *parse_release("4.54"));
  CHECK(*parse_release("4.100.0") > *parse_release("4.54.0"));
}

TEST_CASE("--versions takes known packages, normalised, and names what is wrong") {
  PackageVersions v;
  REQUIRE(parse_versions("Transformers==4.44.2, peft=0.12.0", "cli", v).is_ok());
  CHECK(v.at("transformers") == "4.44.2");
  CHECK(v.at("peft") == "0.12.0");
  CHECK(versions_text(v) == "peft 0.12.0, transformers 4.44.2");
  const Status unknown = parse_versions("numpy=1.26.4", "cli", v);
  CHECK(unknown.message().find("'numpy=1.26.4'") != std::string::npos);
  CHECK(unknown.message().find("transformers, torch, peft") != std::string::npos);
  CHECK(parse_versions("transformers", "cli", v).message().find("NAME=RELEASE") != std::string::npos);
  CHECK(parse_versions("torch=latest", "cli", v).message().find("expected a release") != std::string::npos);
}

TEST_CASE("a pip freeze gives the releases of the packages headroom reads, and nothing else") {
  testing::TempDir dir;
  const std::string path = dir.file("freeze.txt");
  std::ofstream(path) << "# comment\n-e git+https://x/y.git#egg=y\naccelerate==1.0.1\nTransformers==4.44.2\n"
                         "torch==2.4.1+cu121\npeft @ file:///wheels/peft.whl\nnumpy==1.26.4 ; python_version<'3.13'\n";
  PackageVersions v;
  REQUIRE(read_pip_freeze(path, v).is_ok());
  CHECK(v.size() == 3);  // numpy and the editable and file installs are not read
  CHECK(v.at("accelerate") == "1.0.1");
  CHECK(v.at("transformers") == "4.44.2");
  CHECK(v.at("torch") == "2.4.1+cu121");

  std::ofstream(path) << "transformers==four\n";
  const Status bad = read_pip_freeze(path, v);
  CHECK(bad.message().find("line 1: transformers: expected a release") != std::string::npos);
  std::ofstream(path) << "model: llama\nlr: 1e-4\n";
  CHECK(read_pip_freeze(path, v).message().find("expected the output of pip freeze") != std::string::npos);
}

TEST_CASE("settings JSON carries versions and repeat_kv, strictly") {
  RunSettings s = trainer_run("4.44.2");
  s.repeat_kv = false;
  const nlohmann::json j = settings_to_json(s);
  CHECK(j.at("versions").at("transformers") == "4.44.2");
  Result<RunSettings> back = settings_from_json(j, "test");
  REQUIRE(back.is_ok());
  CHECK(back->versions == s.versions);
  CHECK(back->repeat_kv == false);
  nlohmann::json wrong = j;
  wrong["versions"] = {{"transformers", 4.44}};
  CHECK(settings_from_json(wrong, "f.json").message().find("settings.versions.transformers") != std::string::npos);
  wrong["versions"] = {{"unsloth", "0.9.0"}};
  CHECK(settings_from_json(wrong, "f.json").message().find("f.json: versions: 'unsloth=0.9.0'") != std::string::npos);
  wrong = j;
  wrong["attention"] = "eager";
  CHECK(settings_from_json(wrong, "f.json").message().find("repeat_kv") != std::string::npos);
  wrong["attention"] = "flex";
  CHECK(settings_from_json(wrong, "f.json").is_ok());
}

TEST_CASE("the Trainer's loss, optimizer and repeat_kv follow the transformers release") {
  const ResolvedStack old = resolve_stack(trainer_run("4.44.2"));
  CHECK(old.unknowns.empty());
  CHECK(old.top.loss.impl == LossImpl::kUpcastShift);
  CHECK(old.top.optimizer_impl == OptimizerImpl::kForeach);
  CHECK(old.top.repeat_kv);
  CHECK_FALSE(old.repeat_kv_open);

  const ResolvedStack mid = resolve_stack(trainer_run("4.50.0"));
  CHECK(mid.top.loss.impl == LossImpl::kFull);
  CHECK(mid.top.repeat_kv);
  CHECK(mid.top.optimizer_impl == OptimizerImpl::kForeach);

  RunSettings recent = trainer_run("5.23.0");
  const ResolvedStack open_torch = resolve_stack(recent);
  CHECK(open_torch.top.loss.impl == LossImpl::kFull);
  CHECK_FALSE(open_torch.top.repeat_kv);
  CHECK(open_torch.unknowns.size() == 1);  // fused only with torch >= 2.8
  REQUIRE(parse_versions("torch=2.11.0", "test", recent.versions).is_ok());
  CHECK(resolve_stack(recent).unknowns.empty());
  CHECK(resolve_stack(recent).top.optimizer_impl == OptimizerImpl::kFused);
  REQUIRE(parse_versions("torch=2.7.1", "test", recent.versions).is_ok());
  CHECK(resolve_stack(recent).top.optimizer_impl == OptimizerImpl::kForeach);

  // No release: the band spans them, the top at the older, costlier releases.
  const ResolvedStack none = resolve_stack(trainer_run(""));
  CHECK(none.top.loss.impl == LossImpl::kUpcastShift);
  CHECK(none.bottom.loss.impl == LossImpl::kFull);
  CHECK(none.top.repeat_kv);
  CHECK_FALSE(none.bottom.repeat_kv);
  CHECK(none.repeat_kv_open);
  REQUIRE(bottom_of_band(trainer_run("")).has_value());
  CHECK(bottom_of_band(trainer_run(""))->repeat_kv == false);

  // An explicit flag wins over the release.
  RunSettings pinned = trainer_run("4.44.2");
  pinned.loss = LossSpec{LossImpl::kFull, 8};
  pinned.repeat_kv = false;
  CHECK(resolve_stack(pinned).top.loss.impl == LossImpl::kFull);
  CHECK_FALSE(resolve_stack(pinned).top.repeat_kv);

  // torchtune and litgpt build their own attention, which always copies K and V
  // (oracle envs tt and lg).
  RunSettings tune = trainer_run("5.23.0");
  tune.stack = Stack::kTorchtune;
  CHECK(resolve_stack(tune).top.repeat_kv);
  tune.stack = Stack::kLitgpt;
  CHECK(resolve_stack(tune).top.repeat_kv);
  tune.stack = Stack::kTorchtune;
  CHECK(resolve_stack(tune).top.loss.impl == LossImpl::kChunked);
}

TEST_CASE("PEFT before 0.12 makes LoRA adapters in the base weight's dtype, QLoRA's stay fp32") {
  RunSettings s = trainer_run("4.44.2");
  s.mode = TrainMode::kLora;
  CHECK(resolve_stack(s).top.adapter_dtype == AdapterDtype::kFp32);
  REQUIRE(parse_versions("peft=0.11.1", "test", s.versions).is_ok());
  CHECK(resolve_stack(s).top.adapter_dtype == AdapterDtype::kModel);
  s.mode = TrainMode::kQlora;
  CHECK(resolve_stack(s).top.adapter_dtype == AdapterDtype::kFp32);
}

TEST_CASE("repeat_kv: SDPA keeps K and V copied to every head, 2 x T x (H - Hkv) x D x 2 bytes more a layer") {
  // Llama 3.2 1B: 16 layers, 32 query heads, 8 K/V heads, head_dim 64.
  RunSettings grouped = trainer_run("5.23.0");
  RunSettings copied = trainer_run("4.44.2");
  copied.loss = grouped.loss = LossSpec{LossImpl::kFull, 8};  // only the attention differs
  copied.mode = grouped.mode = TrainMode::kLora;  // the peak in backward, every layer's saves held
  const ModelContext a = prepared_context(grouped);
  const ModelContext b = prepared_context(copied);
  CHECK(count_op(a.graph, "repeat_kv") == 0);
  CHECK(count_op(b.graph, "repeat_kv") == 2 * 16);
  const int64_t tokens = 512;
  const int64_t extra = 16 * 2 * tokens * (32 - 8) * 64 * 2;
  CHECK(predict_as_given(copied).peak.activations - predict_as_given(grouped).peak.activations == extra);
  // Eager attention copies under any release.
  grouped.attention = models::AttentionImpl::kEager;
  CHECK(count_op(prepared_context(grouped).graph, "repeat_kv") == 2 * 16);
}

TEST_CASE("the band names the release only where the model has grouped K/V under SDPA") {
  const auto says_repeat_kv = [](const RunSettings& s) {
    const Result<FitAnswer> answer = fit(s);
    REQUIRE_MESSAGE(answer.is_ok(), answer.message());
    for (const std::string& unknown : answer->as_given.prediction.band_unknowns) {
      if (unknown.find("repeat_kv") != std::string::npos) return true;
    }
    return false;
  };
  CHECK(says_repeat_kv(trainer_run("")));
  CHECK_FALSE(says_repeat_kv(trainer_run("4.44.2")));
  RunSettings gpt2 = trainer_run("");
  gpt2.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/gpt2-medium";
  CHECK_FALSE(says_repeat_kv(gpt2));  // every head has its own K and V
}

}  // namespace headroom::planner
