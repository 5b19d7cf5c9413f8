// --autocast: whether the forward of a bf16 model runs under torch.autocast,
// from the command line to the stack line, the band and the settings
// (docs/stacks.md, "Autocast over a bf16 model").
#include <string>

#include "tests/cli/cli_harness.h"

namespace headroom {
namespace {

using namespace cli_harness;

const std::string kVit = "fit vit-b-16 --gpu 4090 --precision bf16 --batch 64";

}  // namespace

TEST_CASE("--autocast pins the forward's autocast, and an unspecified stack prices it as a band") {
  const RunOutput open = run_headroom(kVit);
  REQUIRE_MESSAGE(open.exit_code == 0, open.err);
  CHECK(contains(open.out, "forward without autocast to under autocast"));
  CHECK(contains(open.out, "give --autocast"));

  const RunOutput trainer = run_headroom(kVit + " --stack hf-trainer --json");
  const RunOutput off = run_headroom(kVit + " --stack hf-trainer --autocast off --json");
  REQUIRE_MESSAGE(trainer.exit_code == 0, trainer.err);
  REQUIRE_MESSAGE(off.exit_code == 0, off.err);
  const auto peak = [](const RunOutput& run) {
    return parse_json(run.out)["as_given"]["prediction"]["peak_allocated_bytes"].get<double>();
  };
  // ViT's LayerNorms keep fp32 copies of their inputs, and q, k, v each a 16-bit copy of the norm.
  CHECK(peak(trainer) > 1.1 * peak(off));
  CHECK(parse_json(off.out)["as_given"]["settings"]["autocast"] == false);

  const RunOutput bad = run_headroom(kVit + " --autocast yes-please");
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.err, "--autocast"));

  // Under DeepSpeed-style mixed precision there is no such choice: refused, naming the field.
  const RunOutput mixed = run_headroom("fit vit-b-16 --gpu 4090 --precision bf16-mixed --autocast on");
  CHECK(mixed.exit_code == 2);
  CHECK(contains(mixed.err, "autocast"));
  CHECK(contains(mixed.err, "precision bf16"));
}

}  // namespace headroom
