// Budgets the user did not give do not decide the verdict (issue 36): a run that fits
// the GPU but needs more host RAM than the assumed 128 GiB answers FITS and names
// what it needs; the same budget given decides.
#include <string>

#include "tests/cli/cli_harness.h"

namespace headroom {
namespace {

using namespace cli_harness;

const std::string kRun = "fit mistral-7b --gpu 3090 --gpus 4 --zero 3 --offload-param cpu --offload-optimizer cpu";

}  // namespace

TEST_CASE("an assumed host RAM budget names the need, a given one decides") {
  const RunOutput assumed = run_headroom(kRun);
  REQUIRE_MESSAGE(assumed.exit_code == 0, assumed.err);
  CHECK(contains(assumed.out, "FITS on NVIDIA GeForce RTX 3090"));
  CHECK(contains(assumed.out, "of host RAM per node, more than the 128.0 GiB assumed (give --host-ram)"));
  CHECK(contains(assumed.out, "of 128.0 GiB assumed"));

  const nlohmann::json json = parse_json(run_headroom(kRun + " --json").out);
  CHECK(json["fits"] == true);
  CHECK(json["as_given"]["prediction"]["host_ram_budget_assumed"] == true);
  CHECK(json["as_given"]["settings"].contains("host_ram_bytes") == false);

  const RunOutput given = run_headroom(kRun + " --host-ram 128GiB");
  REQUIRE_MESSAGE(given.exit_code == 0, given.err);
  CHECK(contains(given.out, "DOES NOT FIT on NVIDIA GeForce RTX 3090"));
  CHECK(contains(given.out, "host RAM needs"));
  const nlohmann::json given_json = parse_json(run_headroom(kRun + " --host-ram 128GiB --json").out);
  CHECK(given_json["fits"] == false);
  CHECK(given_json["as_given"]["settings"]["host_ram_bytes"] == int64_t{128} << 30);
}

}  // namespace headroom
