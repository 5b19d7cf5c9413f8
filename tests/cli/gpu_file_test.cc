// The GPU catalogue at the command line (issue 39): a GPU without bf16 refuses
// bf16 runs, --gpu-file describes a GPU of one's own and travels in the plan
// file to simulate and report, every bad field is refused by name, and an unknown
// GPU's message says what to do instead.
#include <string>

#include "tests/cli/cli_harness.h"

namespace headroom::cli_harness {
namespace {

// A 20 GB Ampere lab card that is in no catalogue.
const char* kLabCard = R"({
  "id": "lab-card",
  "name": "Lab Card 20GB",
  "architecture": "ampere",
  "memory_bytes": 21474836480,
  "bf16_tflops": 100,
  "fp16_tflops": 100,
  "fp32_tflops": 25,
  "memory_bandwidth_gbps": 700,
  "host_link_gbps": 25,
  "sm_count": 64,
  "source": "our own measurement"
})";

TEST_CASE("a GPU without bf16 refuses a bf16 run, naming the GPU and the fp16 choices") {
  for (const std::string& args : {std::string("fit tiny-llama --gpu t4"),  // bf16-mixed is the default
                                  std::string("fit tiny-llama --gpu v100 --precision bf16-amp"),
                                  std::string("plan tiny-llama --gpu v100-16g --precision bf16")}) {
    CAPTURE(args);
    const RunOutput run = run_headroom(args);
    CHECK(run.exit_code == 2);
    CHECK(contains(run.err, "precision: "));
    CHECK((contains(run.err, "NVIDIA T4") || contains(run.err, "NVIDIA V100")));
    CHECK(contains(run.err, "--precision fp16-amp"));
    CHECK(contains(run.err, "fp16-mixed"));
    CHECK(run.out.empty());
  }
  // fp16 mixed precision is answered on both.
  CHECK(run_headroom("fit tiny-llama --gpu t4 --precision fp16-amp").exit_code == 0);
  CHECK(run_headroom("plan tiny-llama --gpu v100 --precision fp16-mixed").exit_code == 0);
}

TEST_CASE("an unknown GPU's message names --gpu-mem, --gpu-file and headroom gpus") {
  const RunOutput run = run_headroom("fit tiny-llama --gpu a10g");
  CHECK(run.exit_code == 1);
  CHECK(contains(run.err, "unknown GPU 'a10g'"));
  CHECK(contains(run.err, "--gpu-mem"));
  CHECK(contains(run.err, "--gpu-file"));
  CHECK(contains(run.err, "headroom gpus"));
}

TEST_CASE("--gpu-file: the plan carries the GPU, and simulate and report see the same one") {
  TempDir dir;
  const std::string card = dir.file("card.json");
  const std::string plan = dir.file("plan.json");
  write_text(card, kLabCard);
  const RunOutput fit = run_headroom("fit tiny-llama --gpu-file " + quoted(card) + " --json -o " + quoted(plan));
  REQUIRE(fit.exit_code == 0);
  const nlohmann::json written = parse_json(read_text(plan));
  CHECK(written["settings"]["gpu"] == "lab-card");
  CHECK(written["settings"]["gpu_spec"]["name"] == "Lab Card 20GB");
  CHECK(written["settings"]["gpu_spec"]["memory_bytes"] == 21474836480);
  // The file is not needed again: the plan holds every figure.
  std::filesystem::remove(card);
  const RunOutput simulated = run_headroom("simulate " + quoted(plan));
  CHECK(simulated.exit_code == 0);
  CHECK(contains(simulated.out, "Lab Card 20GB"));
  const RunOutput reported = run_headroom("report " + quoted(plan) + " -o " + quoted(dir.file("r.html")));
  CHECK(reported.exit_code == 0);
  CHECK(contains(read_text(dir.file("r.html")), "Lab Card 20GB"));
  // A plan whose gpu and gpu_spec disagree is refused, not silently mixed.
  nlohmann::json edited = written;
  edited["settings"]["gpu"] = "a6000";
  write_text(plan, edited.dump());
  const RunOutput mixed = run_headroom("simulate " + quoted(plan));
  CHECK(mixed.exit_code == 2);
  CHECK(contains(mixed.err, "settings.gpu: expected \"lab-card\", the id of settings.gpu_spec"));
}

TEST_CASE("--gpu-file with --gpu-mem and in plan, and never beside --gpu") {
  TempDir dir;
  const std::string card = dir.file("card.json");
  write_text(card, kLabCard);
  const RunOutput planned = run_headroom("plan tiny-llama --gpu-file " + quoted(card) + " --gpu-mem 16GiB");
  REQUIRE(planned.exit_code == 0);
  CHECK(contains(planned.out, "Lab Card 20GB"));
  const RunOutput both = run_headroom("fit tiny-llama --gpu-file " + quoted(card) + " --gpu 4090");
  CHECK(both.exit_code == 2);
  CHECK(contains(both.err, "--gpu-file: conflicts with --gpu 4090 (expected one of them)"));
}

TEST_CASE("--gpu-file refuses every bad field with the file and the field named") {
  TempDir dir;
  const std::string card = dir.file("card.json");
  const nlohmann::json good = nlohmann::json::parse(kLabCard);
  struct Bad {
    std::string field;
    nlohmann::json value;  // null: the field is removed
    std::string expected;
  };
  const Bad cases[] = {
      {"memory_bytes", nullptr, "memory_bytes: expected an integer from 1048576 to"},
      {"memory_bytes", -5, "memory_bytes: expected an integer from 1048576 to"},
      {"memory_bytes", 2.5e10, "memory_bytes: expected an integer"},
      {"memory_bytes", "20GB", "memory_bytes: expected an integer"},
      {"fp16_tflops", 0, "fp16_tflops: expected a number above 0"},
      {"fp16_tflops", nullptr, "fp16_tflops: expected a number above 0"},
      {"bf16_tflops", -1, "bf16_tflops: expected a number from 0"},
      {"fp32_tflops", 1e9, "fp32_tflops: expected a number above 0 up to"},
      {"memory_bandwidth_gbps", true, "memory_bandwidth_gbps: expected a number"},
      {"host_link_gbps", nullptr, "host_link_gbps: expected a number above 0"},
      {"architecture", "kepler", "architecture: expected one of volta, turing, ampere, ada, hopper, blackwell"},
      {"name", "", "name: expected a non-empty string"},
      {"id", nullptr, "id: expected a non-empty string"},
      {"sm_count", 1.5, "sm_count: expected an integer"},
      {"matmul_efficiency", 3, "matmul_efficiency: expected a number from 0 up to 2"},
      {"cuda_context_bytes", 21474836480, "cuda_context_bytes: expected less than memory_bytes"},
      {"aliases", "x", "aliases: expected a list of strings"},
      {"memory_mib", 20480, "memory_mib: unknown key"},
  };
  for (const Bad& bad : cases) {
    nlohmann::json edited = good;
    if (bad.value.is_null()) {
      edited.erase(bad.field);
    } else {
      edited[bad.field] = bad.value;
    }
    write_text(card, edited.dump());
    const RunOutput run = run_headroom("fit tiny-llama --gpu-file " + quoted(card));
    CAPTURE(bad.field);
    CAPTURE(run.err);
    CHECK(run.exit_code == 2);
    CHECK(contains(run.err, card + ": " + bad.expected));
    CHECK(run.out.empty());
  }
}

TEST_CASE("--gpu-file refuses a file that is not one GPU object") {
  TempDir dir;
  const std::string card = dir.file("card.json");
  write_text(card, "[1, 2]");
  const RunOutput array = run_headroom("fit tiny-llama --gpu-file " + quoted(card));
  CHECK(array.exit_code == 2);
  CHECK(contains(array.err, card + ": expected a JSON object of GPU fields"));
  write_text(card, std::string(100, '[') + std::string(100, ']'));
  const RunOutput deep = run_headroom("fit tiny-llama --gpu-file " + quoted(card));
  CHECK(deep.exit_code == 2);
  CHECK(contains(deep.err, card));
  CHECK(contains(deep.err, "deep"));
  write_text(card, R"({"id": "x", "id": "y"})");
  const RunOutput duplicate = run_headroom("fit tiny-llama --gpu-file " + quoted(card));
  CHECK(duplicate.exit_code == 2);
  CHECK(contains(duplicate.err, "duplicate key"));
  const RunOutput missing = run_headroom("fit tiny-llama --gpu-file " + quoted(dir.file("none.json")));
  CHECK(missing.exit_code != 0);
  CHECK(contains(missing.err, dir.file("none.json")));
}

}  // namespace
}  // namespace headroom::cli_harness
