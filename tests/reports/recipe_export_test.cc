// The plan written back into a torchtune config or a Trainer's arguments
// (reports/recipe_export.h): the keys that change, a patch the file takes, and
// notes for what the keys cannot say.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "planner/predict/model_context.h"
#include "planner/predict/planner.h"
#include "reports/recipe_export.h"

namespace headroom::reports {
namespace {

struct Fixture {
  planner::RunSettings given;
  planner::Plan plan;
  std::vector<bool> checkpointable;
};

// tiny-llama as given (micro-batch 4, accumulation 2, no checkpointing), and a
// plan of micro-batch 1 x 8 with every layer checkpointed.
Fixture fixture() {
  Fixture f;
  f.given.model = "tiny-llama";
  f.given.gpu = "4090";
  f.given.micro_batch = 4;
  f.given.grad_accum = 2;
  f.given.seq_len = 128;
  Result<planner::FitAnswer> answer = planner::fit(f.given);
  REQUIRE(answer.is_ok());
  f.plan = answer->as_given;
  Result<planner::ModelContext> context = planner::prepare_context(f.given);
  REQUIRE(context.is_ok());
  for (const graph::Block& block : context->graph.blocks) f.checkpointable.push_back(block.checkpointable);
  f.plan.config.micro_batch = 1;
  f.plan.config.grad_accum = 8;
  for (size_t b = 0; b < f.plan.blocks.size(); ++b) {
    f.plan.blocks[b] = f.checkpointable[b] ? planner::BlockChoice::kCheckpoint : planner::BlockChoice::kKeep;
  }
  return f;
}

constexpr const char* kYaml =
    "batch_size: 4  # per device\n"
    "gradient_accumulation_steps: 2\n"
    "dtype: bf16\n";

}  // namespace

TEST_CASE("torchtune: the changed keys as overrides and as a patch of the file, comments kept") {
  Fixture f = fixture();
  const RecipePatch patch = torchtune_patch(f.plan, f.given, f.checkpointable, kYaml, "c.yaml", {"dtype=bf16"});
  CHECK(patch.changes == std::vector<std::pair<std::string, std::string>>{
                             {"batch_size", "1"}, {"gradient_accumulation_steps", "8"},
                             {"enable_activation_checkpointing", "True"}});
  CHECK(patch.notes.empty());
  CHECK(patch.text.find("#     dtype=bf16 \\\n#     batch_size=1") != std::string::npos);  // after the given ones
  CHECK(patch.text.find("--- c.yaml\n+++ c.yaml\n") != std::string::npos);
  CHECK(patch.text.find("@@ -1,1 +1,1 @@\n-batch_size: 4  # per device\n+batch_size: 1  # per device\n") !=
        std::string::npos);
  CHECK(patch.text.find("@@ -2,1 +2,1 @@\n-gradient_accumulation_steps: 2\n+gradient_accumulation_steps: 8\n") !=
        std::string::npos);
  // A key the file lacks is appended.
  CHECK(patch.text.find("@@ -3,0 +4,1 @@\n+enable_activation_checkpointing: True\n") != std::string::npos);

  // Some layers only: every layer is written, and the note says so.
  f.plan.blocks[1] = planner::BlockChoice::kKeep;
  const RecipePatch partial = torchtune_patch(f.plan, f.given, f.checkpointable, kYaml, "c.yaml");
  REQUIRE(partial.notes.size() == 1);
  CHECK(partial.notes[0].find("checkpoints every layer or none") != std::string::npos);

  // The plan as given changes nothing.
  f.plan.config.micro_batch = 4;
  f.plan.config.grad_accum = 2;
  for (auto& block : f.plan.blocks) block = planner::BlockChoice::kKeep;
  CHECK(torchtune_patch(f.plan, f.given, f.checkpointable, kYaml, "c.yaml").changes.empty());
}

TEST_CASE("torchtune: a quoted key and a value on its own line are edited in place, never appended twice") {
  Fixture f = fixture();
  const char* yaml =
      "\"batch_size\": 4\n"
      "gradient_accumulation_steps:\n"
      "  # per step\n"
      "  2  # micro-batches\n"
      "dtype: bf16\n";
  const RecipePatch patch = torchtune_patch(f.plan, f.given, f.checkpointable, yaml, "c.yaml");
  CHECK(patch.text.find("@@ -1,1 +1,1 @@\n-\"batch_size\": 4\n+\"batch_size\": 1\n") != std::string::npos);
  CHECK(patch.text.find("@@ -4,1 +4,1 @@\n-  2  # micro-batches\n+  8  # micro-batches\n") != std::string::npos);
  CHECK(patch.text.find("+batch_size:") == std::string::npos);
  CHECK(patch.text.find("+gradient_accumulation_steps:") == std::string::npos);
}

TEST_CASE("Trainer arguments: command line and JSON merge patch, ZeRO points at the DeepSpeed export") {
  Fixture f = fixture();
  f.plan.config.zero_stage = 2;
  f.plan.config.offload_optimizer = planner::Offload::kCpu;
  const RecipePatch patch = trainer_arguments_patch(f.plan, f.given, f.checkpointable);
  CHECK(patch.text.find("--per_device_train_batch_size 1 --gradient_accumulation_steps 8 --gradient_checkpointing "
                        "True --deepspeed ds_config.json") != std::string::npos);
  CHECK(patch.text.find("\"gradient_checkpointing\": true") != std::string::npos);
  CHECK(patch.text.find("\"per_device_train_batch_size\": 1") != std::string::npos);
  REQUIRE(patch.notes.size() == 1);
  CHECK(patch.notes[0].find("--emit deepspeed=ds_config.json") != std::string::npos);
}

}  // namespace headroom::reports
