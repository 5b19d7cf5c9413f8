// Accelerate configs (planner/configs/accelerate_import.h): processes and machines, the
// mixed precision, and the FSDP or DeepSpeed plugin onto the run.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "planner/configs/accelerate_import.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {
namespace {

const std::string kData = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/accelerate/";

bool listed(const std::vector<std::string>& keys, const std::string& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

std::string refusal(const std::string& yaml) {
  Result<ConfigImport> out = import_accelerate_config(yaml, "a.yaml", RunSettings{});
  REQUIRE_FALSE(out.is_ok());
  return out.message();
}

}  // namespace

TEST_CASE("an FSDP config: 8 processes on one machine, full shard, checkpointing, bf16 autocast") {
  Result<ConfigImport> fsdp = load_accelerate_config(kData + "fsdp_8gpu.yaml", RunSettings{});
  REQUIRE_MESSAGE(fsdp.is_ok(), fsdp.message());
  const RunSettings& s = fsdp->settings;
  CHECK(s.gpus_per_node == 8);
  CHECK(s.nodes == 1);
  CHECK(s.zero_stage == 3);
  CHECK(s.offload_param == Offload::kNone);
  CHECK(s.checkpointing == CheckpointPolicy::kEveryBlock);
  CHECK(s.precision == Precision::kBf16Amp);
  CHECK_FALSE(listed(fsdp->ignored, "fsdp_config.fsdp_auto_wrap_policy"));
  CHECK(s.fsdp_wrap == FsdpWrap::kLayers);  // TRANSFORMER_BASED_WRAP
  CHECK(s.fsdp_no_sync == true);             // Accelerator.accumulate's default
  CHECK(listed(fsdp->ignored, "rdzv_backend"));
  CHECK_FALSE(listed(fsdp->ignored, "fsdp_config.fsdp_sharding_strategy"));
  // No fsdp_version: Accelerate's default, FSDP1 (FullyShardedDataParallelPlugin).
  REQUIRE(s.sharding.has_value());
  CHECK(*s.sharding == Sharding::kFsdp1);
}

TEST_CASE("fsdp_version 2 is FSDP2: its CPU offload moves parameters and the optimizer together") {
  Result<ConfigImport> v2 = import_accelerate_config(
      "distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: true\n"
      "  fsdp_offload_params: true\n",
      "a.yaml", RunSettings{});
  REQUIRE_MESSAGE(v2.is_ok(), v2.message());
  REQUIRE(v2->settings.sharding.has_value());
  CHECK(*v2->settings.sharding == Sharding::kFsdp2);
  CHECK(v2->settings.zero_stage == 3);
  CHECK(v2->settings.offload_param == Offload::kCpu);
  CHECK(v2->settings.offload_optimizer == Offload::kCpu);
  RunSettings s = v2->settings;
  s.gpus_per_node = 8;
  CHECK(validate_settings(s, "a").is_ok());
  // FSDP1's CPUOffload(offload_params=True) is read too, and NO_WRAP makes the whole model its one unit.
  Result<ConfigImport> v1 = import_accelerate_config(
      "distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n  fsdp_offload_params: true\n"
      "  fsdp_auto_wrap_policy: NO_WRAP\n",
      "a.yaml", RunSettings{});
  REQUIRE_MESSAGE(v1.is_ok(), v1.message());
  CHECK(*v1->settings.sharding == Sharding::kFsdp1);
  CHECK(v1->settings.offload_param == Offload::kCpu);
  CHECK(v1->settings.offload_optimizer == Offload::kCpu);
  CHECK(v1->settings.fsdp_wrap == FsdpWrap::kModel);
  // Without fsdp_auto_wrap_policy Accelerate wraps nothing (NO_WRAP, its default): one unit, said.
  Result<ConfigImport> bare = import_accelerate_config(
      "distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n", "a.yaml",
      RunSettings{});
  REQUIRE_MESSAGE(bare.is_ok(), bare.message());
  CHECK(bare->settings.fsdp_wrap == FsdpWrap::kModel);
  bool said = false;
  for (const std::string& note : bare->notes) said = said || note.find("NO_WRAP") != std::string::npos;
  CHECK(said);
  RunSettings one = v1->settings;
  one.gpus_per_node = 8;
  CHECK(validate_settings(one, "a").is_ok());
  CHECK(refusal("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_auto_wrap_policy: NO_WRAP\n")
            .find("a.yaml: fsdp_config.fsdp_auto_wrap_policy: expected TRANSFORMER_BASED_WRAP with FSDP2") == 0);
  CHECK(refusal("distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: LAYER_WRAP\n")
            .find("a.yaml: fsdp_config.fsdp_auto_wrap_policy: expected") == 0);
  CHECK(refusal("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 3\n")
            .find("a.yaml: fsdp_config.fsdp_version: expected 1 or 2") == 0);
}

TEST_CASE("a DeepSpeed plugin config: 2 machines of 4, ZeRO-2 with CPU optimizer offload, fp16") {
  Result<ConfigImport> ds = load_accelerate_config(kData + "deepspeed_zero2_offload.yaml", RunSettings{});
  REQUIRE_MESSAGE(ds.is_ok(), ds.message());
  const RunSettings& s = ds->settings;
  CHECK(s.nodes == 2);
  CHECK(s.gpus_per_node == 4);
  CHECK(s.zero_stage == 2);
  CHECK(s.offload_optimizer == Offload::kCpu);
  CHECK(s.offload_param == Offload::kNone);
  CHECK(s.grad_accum == 4);
  CHECK(s.precision == Precision::kFp16Amp);
  CHECK(validate_settings(s, "a").is_ok());
}

TEST_CASE("what an Accelerate config cannot say is refused by name") {
  CHECK(refusal("distributed_type: XLA\n").find("a.yaml: distributed_type: expected NO, MULTI_GPU, FSDP or DEEPSPEED") == 0);
  CHECK(refusal("num_machines: 3\nnum_processes: 8\n").find("a.yaml: num_processes: expected a multiple of num_machines") ==
        0);
  CHECK(refusal("mixed_precision: fp8\n").find("a.yaml: mixed_precision: expected no, fp16 or bf16") == 0);
  CHECK(refusal("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 4\n")
            .find("a.yaml: deepspeed_config.zero_stage: expected 0, 1, 2 or 3") == 0);
  CHECK(refusal("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: SHARD_GRAD_OP\n  fsdp_offload_params: true\n")
            .find("a.yaml: fsdp_config.fsdp_offload_params: expected false") == 0);
  // What DeepSpeed itself refuses is refused with the file named (found by fuzzing).
  CHECK(refusal("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n  offload_optimizer_device: nvme\n")
            .find("a.yaml: ") == 0);
  CHECK(refusal("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n  offload_optimizer_device: nvme\n")
            .find("offload_optimizer") != std::string::npos);
  // The numbers older versions wrote for the sharding strategy, and hybrid sharding within a node.
  Result<ConfigImport> hybrid = import_accelerate_config(
      "distributed_type: FSDP\nnum_machines: 2\nnum_processes: 16\nfsdp_config:\n  fsdp_sharding_strategy: 4\n", "a",
      RunSettings{});
  REQUIRE_MESSAGE(hybrid.is_ok(), hybrid.message());
  CHECK(hybrid->settings.zero_stage == 3);
  CHECK(hybrid->shard_within_node);
}

}  // namespace headroom::planner
