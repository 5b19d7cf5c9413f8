// The plan written back into a user's Accelerate config (reports/accelerate_patch.h):
// the plugin keys that change, a DeepSpeed block added to a DDP config, the
// file read again through the importer is the plan, and what the config cannot
// say (the micro-batch, checkpointing outside FSDP) is a note.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "planner/configs/accelerate_import.h"
#include "planner/predict/model_context.h"
#include "planner/predict/planner.h"
#include "reports/accelerate_patch.h"
#include "tests/cli/cli_harness.h"

namespace headroom::reports {
namespace {

using planner::BlockChoice;
using planner::CheckpointPolicy;
using planner::Offload;

struct Fixture {
  planner::RunSettings given;  // the file's run
  planner::Plan plan;
  std::vector<bool> checkpointable;
};

// The run `yaml` says for tiny-llama (micro-batch 2, accumulation 4), and a
// plan of that run to be edited by each case.
Fixture fixture(const std::string& yaml) {
  Fixture f;
  planner::RunSettings base;
  base.model = "tiny-llama";
  base.gpu = "4090";
  base.micro_batch = 2;
  base.grad_accum = 4;
  base.seq_len = 128;
  Result<planner::ConfigImport> imported = planner::import_accelerate_config(yaml, "acc.yaml", base);
  REQUIRE_MESSAGE(imported.is_ok(), imported.message());
  f.given = imported->settings;
  Result<planner::FitAnswer> answer = planner::fit(f.given);
  REQUIRE_MESSAGE(answer.is_ok(), answer.message());
  f.plan = answer->as_given;
  Result<planner::ModelContext> context = planner::prepare_context(f.given);
  REQUIRE(context.is_ok());
  for (const graph::Block& block : context->graph.blocks) f.checkpointable.push_back(block.checkpointable);
  return f;
}

void checkpoint_layers(Fixture& f, bool on) {
  for (size_t b = 0; b < f.plan.blocks.size(); ++b) {
    f.plan.blocks[b] = on && f.checkpointable[b] ? BlockChoice::kCheckpoint : BlockChoice::kKeep;
  }
}

// The diff in `patch.text` applied to `yaml` by patch(1).
std::string applied(const std::string& yaml, const RecipePatch& patch) {
  cli_harness::TempDir dir;
  const std::string file = dir.file("acc.yaml");
  const std::string diff = dir.file("acc.patch");
  cli_harness::write_text(file, yaml);
  cli_harness::write_text(diff, patch.text);
  const std::string command = "patch --quiet " + cli_harness::quoted(file) + " < " + cli_harness::quoted(diff);
  REQUIRE(std::system(command.c_str()) == 0);
  return cli_harness::read_text(file);
}

// The patched file read again, on the same base.
planner::RunSettings reread(const std::string& yaml, const Fixture& f) {
  planner::RunSettings base = f.given;
  Result<planner::ConfigImport> imported = planner::import_accelerate_config(yaml, "acc.yaml", base);
  REQUIRE_MESSAGE(imported.is_ok(), imported.message());
  return imported->settings;
}

bool has_note(const RecipePatch& patch, const std::string& words) {
  return std::any_of(patch.notes.begin(), patch.notes.end(),
                     [&](const std::string& note) { return note.find(words) != std::string::npos; });
}

constexpr const char* kFsdp1 =
    "compute_environment: LOCAL_MACHINE\n"
    "distributed_type: FSDP\n"
    "fsdp_config:\n"
    "  fsdp_activation_checkpointing: false\n"
    "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
    "  fsdp_offload_params: false\n"
    "  fsdp_sharding_strategy: FULL_SHARD  # ZeRO-3\n"
    "  fsdp_state_dict_type: SHARDED_STATE_DICT\n"
    "  fsdp_version: 1\n"
    "mixed_precision: bf16\n"
    "num_machines: 1\n"
    "num_processes: 4\n";

constexpr const char* kDdp =
    "compute_environment: LOCAL_MACHINE\n"
    "debug: false\n"
    "distributed_type: MULTI_GPU\n"
    "downcast_bf16: 'no'\n"
    "gpu_ids: all\n"
    "machine_rank: 0\n"
    "main_training_function: main\n"
    "mixed_precision: bf16\n"
    "num_machines: 1\n"
    "num_processes: 4\n"
    "use_cpu: false\n";

struct Patched {
  Fixture f;
  RecipePatch patch;
  std::string after;  // the config with the patch applied
};

// `fsdp1`, a FULL_SHARD config, with the plan's ZeRO-2 and every layer checkpointed written back.
Patched patched_to_zero2_checkpointed(const std::string& fsdp1) {
  Fixture f = fixture(fsdp1);
  REQUIRE(f.given.zero_stage == 3);
  f.plan.config.zero_stage = 2;
  checkpoint_layers(f, true);
  Result<RecipePatch> patch = accelerate_patch(f.plan, f.given, f.checkpointable, fsdp1, "acc.yaml");
  REQUIRE_MESSAGE(patch.is_ok(), patch.message());
  std::string after = applied(fsdp1, patch.value());
  return Patched{std::move(f), std::move(patch.value()), std::move(after)};
}

}  // namespace

TEST_CASE("Accelerate FSDP1: the sharding strategy and checkpointing lines change, comments and other keys kept") {
  const Patched p = patched_to_zero2_checkpointed(kFsdp1);
  CHECK(p.after ==
        "compute_environment: LOCAL_MACHINE\n"
        "distributed_type: FSDP\n"
        "fsdp_config:\n"
        "  fsdp_activation_checkpointing: true\n"
        "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
        "  fsdp_offload_params: false\n"
        "  fsdp_sharding_strategy: SHARD_GRAD_OP  # ZeRO-3\n"
        "  fsdp_state_dict_type: SHARDED_STATE_DICT\n"
        "  fsdp_version: 1\n"
        "mixed_precision: bf16\n"
        "num_machines: 1\n"
        "num_processes: 4\n");
  const planner::RunSettings read = reread(p.after, p.f);
  CHECK(read.zero_stage == 2);
  CHECK(read.checkpointing == CheckpointPolicy::kEveryBlock);
  CHECK(p.patch.notes.empty());  // the micro-batch and accumulation did not change
}

TEST_CASE("Accelerate: quoted keys and values on their own line are edited in place, never written twice") {
  // Issue 37 item 7: a quoted "distributed_type" got a second, plain one (a duplicate key that
  // headroom's own reader then refused), and a value on the line below its key was left there.
  const std::string fsdp =
      "compute_environment: LOCAL_MACHINE\n"
      "\"distributed_type\": FSDP\n"
      "fsdp_config:\n"
      "  'fsdp_activation_checkpointing': false\n"
      "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
      "  fsdp_offload_params: false\n"
      "  \"fsdp_sharding_strategy\":\n"
      "    # ZeRO-3\n"
      "    FULL_SHARD  # for now\n"
      "  fsdp_version: 1\n"
      "mixed_precision: bf16\n";
  const Patched p = patched_to_zero2_checkpointed(fsdp);
  CHECK(p.after ==
        "compute_environment: LOCAL_MACHINE\n"
        "\"distributed_type\": FSDP\n"
        "fsdp_config:\n"
        "  'fsdp_activation_checkpointing': true\n"
        "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
        "  fsdp_offload_params: false\n"
        "  \"fsdp_sharding_strategy\":\n"
        "    # ZeRO-3\n"
        "    SHARD_GRAD_OP  # for now\n"
        "  fsdp_version: 1\n"
        "mixed_precision: bf16\n");
  const planner::RunSettings read = reread(p.after, p.f);
  CHECK(read.zero_stage == 2);
  CHECK(read.checkpointing == CheckpointPolicy::kEveryBlock);

  const std::string ddp = "\"distributed_type\":\n  MULTI_GPU  # DDP\nmixed_precision: bf16\n'num_processes': 4\n";
  Fixture g = fixture(ddp);
  g.plan.config.zero_stage = 2;
  checkpoint_layers(g, false);
  Result<RecipePatch> to_zero = accelerate_patch(g.plan, g.given, g.checkpointable, ddp, "acc.yaml");
  REQUIRE_MESSAGE(to_zero.is_ok(), to_zero.message());
  const std::string zero = applied(ddp, to_zero.value());
  CHECK(zero.find("\"distributed_type\":\n  DEEPSPEED  # DDP\n") != std::string::npos);
  CHECK(zero.find("distributed_type", zero.find("distributed_type") + 1) == std::string::npos);
  CHECK(reread(zero, g).zero_stage == 2);
}

TEST_CASE("Accelerate DDP config: a plan that shards becomes the DeepSpeed plugin, block inserted in sorted order") {
  Fixture f = fixture(kDdp);
  REQUIRE(f.given.zero_stage == 0);
  f.plan.config.zero_stage = 3;
  f.plan.config.offload_optimizer = Offload::kCpu;
  f.plan.config.offload_param = Offload::kCpu;
  f.plan.config.micro_batch = 1;
  f.plan.config.grad_accum = 8;
  checkpoint_layers(f, false);
  Result<RecipePatch> patch = accelerate_patch(f.plan, f.given, f.checkpointable, kDdp, "acc.yaml");
  REQUIRE_MESSAGE(patch.is_ok(), patch.message());
  const std::string after = applied(kDdp, patch.value());
  CHECK(after ==
        "compute_environment: LOCAL_MACHINE\n"
        "debug: false\n"
        "deepspeed_config:\n"
        "  gradient_accumulation_steps: 8\n"
        "  offload_optimizer_device: cpu\n"
        "  offload_param_device: cpu\n"
        "  zero_stage: 3\n"
        "distributed_type: DEEPSPEED\n"
        "downcast_bf16: 'no'\n"
        "gpu_ids: all\n"
        "machine_rank: 0\n"
        "main_training_function: main\n"
        "mixed_precision: bf16\n"
        "num_machines: 1\n"
        "num_processes: 4\n"
        "use_cpu: false\n");
  const planner::RunSettings read = reread(after, f);
  CHECK(read.zero_stage == 3);
  CHECK(read.offload_optimizer == Offload::kCpu);
  CHECK(read.offload_param == Offload::kCpu);
  CHECK(read.grad_accum == 8);
  // The micro-batch is the script's: said, not written.
  CHECK(has_note(patch.value(), "micro-batch 1"));
}

TEST_CASE("Accelerate DeepSpeed plugin: stage, offload and accumulation keys, and a named DeepSpeed file repointed") {
  const std::string plugin =
      "deepspeed_config:\n"
      "  gradient_accumulation_steps: 4\n"
      "  offload_optimizer_device: cpu\n"
      "  offload_param_device: none\n"
      "  zero_stage: 2\n"
      "distributed_type: DEEPSPEED\n"
      "num_processes: 4\n";
  Fixture f = fixture(plugin);
  f.plan.config.zero_stage = 1;
  f.plan.config.offload_optimizer = Offload::kNone;
  f.plan.config.grad_accum = 2;
  f.plan.config.micro_batch = 4;
  Result<RecipePatch> patch = accelerate_patch(f.plan, f.given, f.checkpointable, plugin, "acc.yaml");
  REQUIRE_MESSAGE(patch.is_ok(), patch.message());
  const planner::RunSettings read = reread(applied(plugin, patch.value()), f);
  CHECK(read.zero_stage == 1);
  CHECK(read.offload_optimizer == Offload::kNone);
  CHECK(read.grad_accum == 2);

  const std::string with_file =
      "deepspeed_config:\n"
      "  deepspeed_config_file: zero2.json\n"
      "distributed_type: DEEPSPEED\n";
  Fixture g = fixture("distributed_type: DEEPSPEED\n");  // the named file is not read here
  g.plan.config.zero_stage = 3;
  Result<RecipePatch> repointed = accelerate_patch(g.plan, g.given, g.checkpointable, with_file, "acc.yaml");
  REQUIRE(repointed.is_ok());
  CHECK(applied(with_file, repointed.value()) ==
        "deepspeed_config:\n  deepspeed_config_file: ds_config.json\ndistributed_type: DEEPSPEED\n");
  CHECK(has_note(repointed.value(), "--emit deepspeed=ds_config.json"));
}

TEST_CASE("Accelerate FSDP2: ZeRO-2 is reshard_after_forward false, and ZeRO-0 is DDP") {
  const std::string fsdp2 =
      "distributed_type: FSDP\n"
      "fsdp_config:\n"
      "  fsdp_reshard_after_forward: true\n"
      "  fsdp_version: 2\n"
      "num_processes: 2\n";
  Fixture f = fixture(fsdp2);
  f.plan.config.zero_stage = 2;
  Result<RecipePatch> patch = accelerate_patch(f.plan, f.given, f.checkpointable, fsdp2, "acc.yaml");
  REQUIRE(patch.is_ok());
  CHECK(reread(applied(fsdp2, patch.value()), f).zero_stage == 2);
  f.plan.config.zero_stage = 0;
  patch = accelerate_patch(f.plan, f.given, f.checkpointable, fsdp2, "acc.yaml");
  REQUIRE(patch.is_ok());
  const std::string after = applied(fsdp2, patch.value());
  CHECK(after.find("distributed_type: MULTI_GPU\n") != std::string::npos);
  CHECK(reread(after, f).zero_stage == 0);
  CHECK(has_note(patch.value(), "FSDP2 cannot leave parameters unsharded"));
}

TEST_CASE("Accelerate: a config that already runs the plan, and a plugin block written inline") {
  Fixture f = fixture(kFsdp1);
  Result<RecipePatch> same = accelerate_patch(f.plan, f.given, f.checkpointable, kFsdp1, "acc.yaml");
  REQUIRE(same.is_ok());
  CHECK(same->text.find("no key to change") != std::string::npos);
  CHECK(same->text.find("@@") == std::string::npos);

  const std::string inline_block = "distributed_type: DEEPSPEED\ndeepspeed_config: {zero_stage: 2}\n";
  Fixture g = fixture(inline_block);
  g.plan.config.zero_stage = 3;
  Result<RecipePatch> refused = accelerate_patch(g.plan, g.given, g.checkpointable, inline_block, "acc.yaml");
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.message().find("acc.yaml: deepspeed_config: written inline") == 0);
}

}  // namespace headroom::reports
