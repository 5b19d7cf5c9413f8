// End-to-end tests of `headroom run`: `headroom fit -o` writes the run as given
// as a plan file, `headroom run` trains it on the CPU (tiny-llama, a few steps of
// ~0.1-1 s each) and reports predicted against measured memory. The training
// cases need a build with LibTorch; in a build without it they are skipped with a
// MESSAGE, but only when the binary itself says it was built without LibTorch.
// The binary-running helpers are a small copy of cli_test.cc's (each test file
// stands alone).
#include <doctest/doctest.h>

#include "tests/cli/cli_harness.h"
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace headroom::cli_harness;  // NOLINT(google-build-using-namespace): test helpers


// The plan every case trains: tiny-llama in fp32 with every block checkpointed,
// micro-batch 2, as `fit -o` writes the run as given. Written once per test
// binary (each headroom process costs ~0.5 s of LibTorch loading); the runs only
// read it.
const std::string& tiny_plan() {
  static const TempDir dir;
  static const std::string path = [] {
    const std::string file = dir.file("plan.json");
    const RunOutput fit = run_headroom(
        "fit tiny-llama --gpu a6000 --precision fp32 --checkpointing every --batch 2 -o " +
        quoted(file));
    REQUIRE(fit.exit_code == 0);
    CHECK(contains(fit.out, "FITS"));
    const nlohmann::json plan = parse_json(read_text(file));
    REQUIRE(plan["format"] == "headroom.plan");
    CHECK(plan["model"] == "tiny-llama");
    CHECK(plan["settings"]["micro_batch"] == 2);
    return file;
  }();
  return path;
}

TEST_CASE("fit -o writes a plan that run trains on the CPU, with metrics and a measurement") {
  TempDir dir;
  const std::string& plan = tiny_plan();
  const std::string metrics = dir.file("metrics.jsonl");
  const std::string measurement = dir.file("measurement.json");
  const RunOutput run =
      run_headroom("run " + quoted(plan) + " --steps 3 --device cpu --json --metrics " +
                   quoted(metrics) + " --measurement-out " + quoted(measurement));
  if (built_without_libtorch(run)) return;
  REQUIRE(run.exit_code == 0);

  // stdout is the one JSON document; progress went to stderr.
  const nlohmann::json json = parse_json(run.out);
  CHECK(json["command"] == "run");
  CHECK(json["first_step"] == 1);
  CHECK(json["last_step"] == 3);
  CHECK(json["resumed_from"] == "");
  REQUIRE(json["categories"].is_array());
  CHECK_FALSE(json["categories"].empty());
  for (const nlohmann::json& category : json["categories"]) {
    CAPTURE(category.dump());
    CHECK(category["category"].is_string());
    CHECK(category["predicted_bytes"].is_number_integer());
    CHECK(category["measured_bytes"].is_number_integer());
    CHECK(category["measured_bytes"].get<int64_t>() > 0);
  }
  const nlohmann::json& steps = json["measurement"]["steps"];
  REQUIRE(steps.size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(steps[i]["step"] == i + 1);
  CHECK(contains(run.err, "step 3/3"));

  // --metrics: one JSON line per step. (No SUBCASEs here: doctest would train
  // once per subcase.)
  std::istringstream lines(read_text(metrics));
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(lines, line);) records.push_back(parse_json(line));
  REQUIRE(records.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(records[i]["step"] == i + 1);
    REQUIRE(records[i]["loss"].is_number());
    CHECK(std::isfinite(records[i]["loss"].get<double>()));
  }

  // --measurement-out: what `headroom report --measurement` reads.
  REQUIRE(fs::exists(measurement));
  const std::string html = dir.file("report.html");
  const RunOutput report = run_headroom("report " + quoted(plan) + " -o " + quoted(html) +
                                        " --measurement " + quoted(measurement));
  CHECK(report.exit_code == 0);
  CHECK(fs::exists(html));
  CHECK(fs::file_size(html) > 0);
}

TEST_CASE("run writes training-state checkpoints and resumes from the newest") {
  TempDir dir;
  const std::string& plan = tiny_plan();
  const std::string checkpoints = dir.file("ckpt");
  const RunOutput first =
      run_headroom("run " + quoted(plan) + " --steps 4 --device cpu --json --checkpoint-dir " +
                   quoted(checkpoints) + " --checkpoint-every 2");
  if (built_without_libtorch(first)) return;
  REQUIRE(first.exit_code == 0);
  const nlohmann::json written = parse_json(first.out);
  CHECK(written["last_step"] == 4);
  CHECK(fs::is_directory(fs::path(checkpoints) / "step-00000004"));

  const RunOutput resumed = run_headroom(
      "run " + quoted(plan) + " --steps 6 --device cpu --json --resume " + quoted(checkpoints));
  REQUIRE(resumed.exit_code == 0);
  const nlohmann::json json = parse_json(resumed.out);
  CHECK(json["first_step"] == 5);
  CHECK(json["last_step"] == 6);
  CHECK(json["resumed_from"] == (fs::path(checkpoints) / "step-00000004").string());
  CHECK(json["measurement"]["steps"].size() == 2);
}

TEST_CASE("run: a metrics file that cannot be written stops the run (--metrics /dev/full)") {
  if (!fs::exists("/dev/full")) {
    MESSAGE("skipped: no /dev/full");
    return;
  }
  const RunOutput run = run_headroom("run " + quoted(tiny_plan()) + " --steps 3 --device cpu --metrics /dev/full");
  if (built_without_libtorch(run)) return;
  CHECK(run.exit_code == 1);
  CHECK(contains(run.err, "step 1: --metrics /dev/full: cannot write: No space left on device; the run stops"));
  CHECK_FALSE(contains(run.err, "step 2/3"));
}

TEST_CASE("run: a checkpoint directory that cannot be written is refused before step 1") {
  TempDir dir;
  const std::string plain = dir.file("plain");
  write_text(plain, "a file, not a directory");
  const RunOutput run = run_headroom("run " + quoted(tiny_plan()) + " --steps 2 --device cpu --checkpoint-every 0 "
                                     "--checkpoint-dir " + quoted(plain + "/ckpt"));
  if (built_without_libtorch(run)) return;
  CHECK(run.exit_code == 1);
  CHECK(contains(run.err, plain + "/ckpt/: checkpoints cannot be written there"));
  CHECK(contains(run.err, "nothing was trained"));
  CHECK_FALSE(contains(run.err, "step 1/2"));
}

TEST_CASE("run: Llama-3-8B on the CPU of a machine without the memory is refused before building") {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  while (meminfo >> key && key != "MemAvailable:") meminfo.ignore(1 << 10, '\n');
  meminfo >> kib;
  if (kib <= 0 || kib > (int64_t{100} << 20)) {
    MESSAGE("skipped: this machine may hold Llama-3-8B's states on the CPU (" << (kib >> 20) << " GiB available)");
    return;
  }
  TempDir dir;
  const std::string plan = dir.file("llama.json");
  REQUIRE(run_headroom("fit llama-3-8b --gpu h100 --lora -o " + quoted(plan)).exit_code == 0);
  const RunOutput run = run_headroom("run " + quoted(plan) + " --steps 1 --device cpu");
  if (built_without_libtorch(run)) return;
  CHECK(run.exit_code == 1);
  CHECK(contains(run.err, "host memory: this plan ("));
  CHECK(contains(run.err, "nothing was built or trained"));
}

TEST_CASE("run: --measurement-out through a symbolic link keeps the link") {
  TempDir dir;
  const std::string target = dir.file("measured.json");
  const std::string link = dir.file("measured.link");
  write_text(target, "old");
  fs::create_symlink(target, link);
  const RunOutput run =
      run_headroom("run " + quoted(tiny_plan()) + " --steps 1 --device cpu --measurement-out " + quoted(link));
  if (built_without_libtorch(run)) return;
  CHECK_MESSAGE(run.exit_code == 0, run.err);
  CHECK(fs::is_symlink(link));
  CHECK(contains(read_text(target), "\"headroom.measurement\""));
}

TEST_CASE("run refuses bad input with the exit status and a message naming it") {
  TempDir dir;
  const std::string& plan = tiny_plan();

  SUBCASE("a missing plan file") {
    const std::string missing = dir.file("no-such-plan.json");
    const RunOutput run = run_headroom("run " + quoted(missing) + " --device cpu --json");
    CHECK(run.exit_code == 2);  // as simulate and report: a bad PLAN argument
    CHECK(contains(run.err, missing));
    CHECK(run.out.empty());
  }

  SUBCASE("--steps 0") {
    const RunOutput run = run_headroom("run " + quoted(plan) + " --steps 0 --device cpu --json");
    CHECK(run.exit_code == 2);
    CHECK(contains(run.err, "--steps"));
    CHECK(run.out.empty());
  }

  SUBCASE("--device tpu") {
    const RunOutput run = run_headroom("run " + quoted(plan) + " --device tpu --json");
    CHECK(run.exit_code == 2);
    CHECK(contains(run.err, "--device"));
    CHECK(contains(run.err, "tpu"));
    CHECK(run.out.empty());
  }

  SUBCASE("a plan for a model the executor has no module for") {
    const std::string gpt2 = dir.file("gpt2-plan.json");
    REQUIRE(run_headroom("fit gpt2 --gpu a6000 -o " + quoted(gpt2)).exit_code == 0);
    const RunOutput run = run_headroom("run " + quoted(gpt2) + " --steps 1 --device cpu --json");
    CHECK(run.exit_code == 1);
    CHECK(contains(run.err, "model: \"gpt2\""));
    CHECK(run.out.empty());
  }

  SUBCASE("--write-calibration on a CPU run") {
    const std::string calibration = dir.file("calibration.json");
    const RunOutput run =
        run_headroom("run " + quoted(plan) + " --steps 1 --device cpu --json --write-calibration " +
                     quoted(calibration));
    CHECK(run.exit_code == 2);  // refused before training, in every build
    CHECK(contains(run.err, "--write-calibration"));
    CHECK(contains(run.err, "GPU"));
    CHECK_FALSE(fs::exists(calibration));
    CHECK(run.out.empty());
  }

  SUBCASE("a token file that does not exist") {
    const RunOutput run = run_headroom(
        "run " + quoted(plan) + " --steps 1 --device cpu --json --data /nonexistent/tokens.bin");
    if (built_without_libtorch(run)) return;
    CHECK(run.exit_code == 2);  // an input file the user named: as a missing PLAN
    CHECK(contains(run.err, "/nonexistent/tokens.bin"));
    CHECK(run.out.empty());
  }
}

}  // namespace
