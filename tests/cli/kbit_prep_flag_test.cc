// --kbit-prep: QLoRA's preparation of the unquantized weights, from the command
// line to the stack line and the settings (docs/stacks.md, "QLoRA preparation").
#include <string>

#include "tests/cli/cli_harness.h"

namespace headroom {
namespace {

using namespace cli_harness;

const std::string kRun = "fit tiny-llama --gpu 4090 --qlora --precision bf16 --stack hf-trainer --seq 128";

}  // namespace

TEST_CASE("--kbit-prep pins the QLoRA preparation, and the stack line names it or its band") {
  const RunOutput open =
      run_headroom("fit llama-3-8b --gpu 4090 --qlora --precision bf16 --stack hf-trainer --seq 2048 --checkpointing every "
                   "--versions bitsandbytes=0.50.2");  // only the preparation of the QLoRA band here
  REQUIRE_MESSAGE(open.exit_code == 0, open.err);
  // The top reserves 0.1 GiB more since the optimizer makes its states at its first step (the simulator replays steps).
  // The bottom rose 0.1 GiB when LlamaMLP came to hold its input until down_proj returns (models/llama.cc).
  // bitsandbytes 0.50's gemm_4bit fallback holds two small fp32 absmax copies beside its weight
  // (mechanisms/bnb_matmul4bit.cc): the allocator replay packs the band's ends 0.1 GiB lower.
  CHECK(contains(open.out, "Band: 10.6 GiB to 14.5 GiB"));
  CHECK(contains(open.out, "QLoRA preparation none to peft"));
  CHECK(contains(open.out, "prepare_model_for_kbit_training"));

  const RunOutput pinned = run_headroom(kRun + " --kbit-prep norms-fp32 --json");
  REQUIRE_MESSAGE(pinned.exit_code == 0, pinned.err);
  CHECK(parse_json(pinned.out)["as_given"]["settings"]["kbit_prep"] == "norms-fp32");

  const RunOutput bad = run_headroom(kRun + " --kbit-prep fp32");
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.err, "--kbit-prep"));
  CHECK(contains(bad.err, "norms-fp32"));

  // DeepSpeed-style mixed precision undoes the upcast: refused with the fix named.
  const RunOutput mixed = run_headroom("fit tiny-llama --gpu 4090 --qlora --precision bf16-mixed --kbit-prep peft");
  CHECK(mixed.exit_code == 2);
  CHECK(contains(mixed.err, "kbit_prep"));
  CHECK(contains(mixed.err, "precision bf16"));
}

}  // namespace headroom
