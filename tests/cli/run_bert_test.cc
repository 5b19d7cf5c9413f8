// `headroom run` on a Hugging Face BertForSequenceClassification config
// (tests/data/hf/tiny-bert: hidden 64, 2 layers, 4 heads, vocab 512, 64
// positions, 4 labels, hidden dropout 0.1, attention dropout 0): the executor's
// BERT module (models/torch/bert_module.h) trains on synthetic token ids with
// the loss falling, and each category it measures apart is within 5% of the
// planner's prediction: fully fine-tuned in fp32, with LoRA adapters in bf16,
// and with every encoder layer checkpointed; and the same for RoBERTa
// (tests/data/hf/tiny-roberta: the same sizes, RobertaConfig's padding id 1,
// 66 positions, one token type, layer_norm_eps 1e-5).
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "tests/cli/cli_harness.h"

namespace {

using namespace headroom::cli_harness;  // NOLINT(google-build-using-namespace): test helpers

std::string tiny_bert() { return std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/tiny-bert"; }
std::string tiny_roberta() { return std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/tiny-roberta"; }

// `fit_flags` after the model and the GPU (--batch among them).
void check_bert_run(const std::string& model, const std::string& fit_flags, double lr) {
  TempDir dir;
  const std::string plan = dir.file("plan.json");
  const RunOutput fit = run_headroom("fit " + quoted(model) + " --gpu a6000 " + fit_flags + " -o " + quoted(plan));
  REQUIRE_MESSAGE(fit.exit_code == 0, fit.err);
  const RunOutput run =
      run_headroom("run " + quoted(plan) + " --steps 12 --lr " + std::to_string(lr) + " --device cpu --json");
  if (built_without_libtorch(run)) return;
  REQUIRE_MESSAGE(run.exit_code == 0, run.err);
  const nlohmann::json json = parse_json(run.out);
  const nlohmann::json& steps = json["measurement"]["steps"];
  REQUIRE(steps.size() == 12);
  const double first = steps[0]["loss"].get<double>();
  const double last = steps[11]["loss"].get<double>();
  CHECK(std::isfinite(last));
  CHECK(last < first / 2);  // 8 sequences (a batch of 4 or 8), 4 labels: memorised within 12 steps
  const int compared = check_categories_within(json, 0.05);
  CHECK(compared == 4);
}

TEST_CASE("run trains a Hugging Face BERT sequence classifier, fully fine-tuned, as the planner prices it") {
  check_bert_run(tiny_bert(), "--batch 4 --precision fp32", 1e-3);
}

TEST_CASE("run trains a Hugging Face BERT sequence classifier with LoRA under the Trainer's stack as priced") {
  check_bert_run(tiny_bert(), "--batch 4 --precision bf16 --lora --stack hf-trainer", 1e-2);
}

// Every layer checkpointed: activations -0.2% at batch 8 (-0.35% at batch 4).
TEST_CASE("run trains a Hugging Face BERT sequence classifier with every layer checkpointed as priced") {
  check_bert_run(tiny_bert(), "--batch 8 --precision fp32 --checkpointing every", 1e-3);
}

TEST_CASE("run trains a Hugging Face RoBERTa sequence classifier, fully fine-tuned and with LoRA, as priced") {
  check_bert_run(tiny_roberta(), "--batch 4 --precision fp32", 3e-3);
  // 1e-2, not more: at 3e-2 the bf16 LoRA run oscillates (its step-12 loss
  // 0.66 on this CPU, 0.88 with AVX2 kernels), too chaotic to check.
  check_bert_run(tiny_roberta(), "--batch 4 --precision bf16 --lora --stack hf-trainer", 1e-2);
}

TEST_CASE("run refuses attention dropout on the CPU, where SDPA keeps what the fused kernel does not") {
  TempDir dir;
  const std::string plan = dir.file("plan.json");
  const RunOutput fit =
      run_headroom("fit " + quoted(tiny_bert()) + " --gpu a6000 --batch 2 --dropout 0.1 -o " + quoted(plan));
  REQUIRE_MESSAGE(fit.exit_code == 0, fit.err);
  const RunOutput run = run_headroom("run " + quoted(plan) + " --steps 1 --device cpu --json");
  if (built_without_libtorch(run)) return;
  CHECK(run.exit_code != 0);
  CHECK(contains(run.err, "attention dropout"));
  CHECK(contains(run.err, "--dropout 0"));
}

}  // namespace
