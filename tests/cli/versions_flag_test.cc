// --versions and --pip-freeze: the run's library releases, from the command line to
// the stack line and the settings (docs/stacks.md, "Releases").
#include <string>

#include "tests/cli/cli_harness.h"
#include "tests/support/temp_dir.h"

namespace headroom {
namespace {

using namespace cli_harness;

const std::string kRun = "fit " + quoted(std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b") +
                         " --gpu 4090 --lora --stack hf-trainer --seq 512";

}  // namespace

TEST_CASE("--pip-freeze gives the releases, --versions wins where both name a package") {
  testing::TempDir dir;
  const std::string freeze = dir.file("freeze.txt");
  write_text(freeze, "datasets==3.0.0\naccelerate==1.15.0\ntransformers==5.23.0\npeft==0.21.2\n");

  const RunOutput frozen = run_headroom(kRun + " --pip-freeze " + quoted(freeze) + " --json");
  REQUIRE_MESSAGE(frozen.exit_code == 0, frozen.err);
  const nlohmann::json versions = parse_json(frozen.out)["as_given"]["settings"]["versions"];
  CHECK(versions["transformers"] == "5.23.0");
  CHECK(versions["peft"] == "0.21.2");
  CHECK(versions["accelerate"] == "1.15.0");   // its FSDP2 units under the Trainer
  CHECK_FALSE(versions.contains("datasets"));  // its release changes nothing headroom prices

  const RunOutput both = run_headroom(kRun + " --versions transformers=4.44.2 --pip-freeze " + quoted(freeze));
  REQUIRE_MESSAGE(both.exit_code == 0, both.err);
  CHECK(contains(both.out, "loss upcast-shift"));
  CHECK(contains(both.out, "as of accelerate 1.15.0, peft 0.21.2, transformers 4.44.2"));

  const RunOutput open = run_headroom(kRun);
  REQUIRE_MESSAGE(open.exit_code == 0, open.err);
  CHECK(contains(open.out, "loss full to upcast-shift"));
  const RunOutput open_json = run_headroom(kRun + " --json");
  REQUIRE_MESSAGE(open_json.exit_code == 0, open_json.err);
  CHECK(contains(parse_json(open_json.out)["as_given"]["prediction"]["band_unknowns"].dump(),
                 "--versions transformers=X"));
}

TEST_CASE("--versions refuses a package or release it cannot read, naming the flag and the choices") {
  const RunOutput unknown = run_headroom(kRun + " --versions numpy=1.26.4");
  CHECK(unknown.exit_code == 2);
  CHECK(contains(unknown.err, "--versions"));
  CHECK(contains(unknown.err, "transformers, torch, peft"));

  const RunOutput bad = run_headroom(kRun + " --versions transformers=latest");
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.err, "expected a release"));

  testing::TempDir dir;
  const std::string not_freeze = dir.file("train.yaml");
  write_text(not_freeze, "model: llama\nlr: 1e-4\n");
  const RunOutput wrong = run_headroom(kRun + " --pip-freeze " + quoted(not_freeze));
  CHECK(wrong.exit_code == 2);
  CHECK(contains(wrong.err, "expected the output of pip freeze"));
}

}  // namespace headroom
