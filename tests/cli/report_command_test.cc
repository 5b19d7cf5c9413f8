// `headroom report` of a plan file (issue 36): the run in the file beside the
// fastest plan in its space, the assumptions and what to apply, and no local
// directory in the page (the report is shared; the footer names the file only).
#include <doctest/doctest.h>

#include <string>

#include "tests/cli/cli_harness.h"

namespace {

using namespace headroom::cli_harness;  // NOLINT(google-build-using-namespace): test helpers

}  // namespace

TEST_CASE("report: the run beside the fastest plan, the assumptions, what to apply, no local path") {
  TempDir dir;
  const std::string plan = dir.file("given.json");
  REQUIRE(run_headroom("fit tiny-llama --gpu a6000 -o " + quoted(plan)).exit_code == 0);
  const std::string html = dir.file("report.html");
  const RunOutput report = run_headroom("report " + quoted(plan) + " -o " + quoted(html));
  REQUIRE_MESSAGE(report.exit_code == 0, report.err);
  const std::string page = read_text(html);
  CHECK(page.find("<th>this plan file</th><th>fastest plan found</th>") != std::string::npos);
  CHECK(page.find("host RAM budget assumed to be 128 GiB per node") != std::string::npos);
  CHECK(page.find("times use uncalibrated efficiencies") != std::string::npos);
  CHECK(page.find("<pre id=\"pre-flags\">--zero ") != std::string::npos);
  CHECK(page.find("from given.json.") != std::string::npos);
  CHECK(page.find(dir.str()) == std::string::npos);
}
