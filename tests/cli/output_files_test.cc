// Issue 14: no output path of `headroom` replaces what is not a regular file
// (a symbolic link stays and its file is updated; a FIFO or device is written
// through), and an answer that cannot be written is a failure, not exit 0.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "tests/cli/cli_harness.h"

namespace {

using namespace headroom::cli_harness;  // NOLINT(google-build-using-namespace): test helpers

// Every command line that writes FILE, with the checks its contents must pass.
struct OutputCase {
  const char* name;
  std::string (*command)(const std::string& file, const std::string& plan);
  const char* contains;  // a piece of what is written
};

const std::vector<OutputCase>& output_cases() {
  static const std::vector<OutputCase> cases = {
      {"fit -o", [](const std::string& f, const std::string&) { return "fit tiny-llama --gpu a6000 -o " + quoted(f); },
       "\"headroom.plan\""},
      {"plan -o", [](const std::string& f, const std::string&) { return "plan tiny-llama --gpu a6000 -o " + quoted(f); },
       "\"headroom.plan\""},
      {"plan --emit", [](const std::string& f, const std::string&) {
         return "plan tiny-llama --gpu a6000 --emit deepspeed=" + quoted(f);
       },
       "zero_optimization"},
      {"report -o", [](const std::string& f, const std::string& plan) { return "report " + quoted(plan) + " -o " + quoted(f); },
       "<html"},
  };
  return cases;
}

std::string plan_file(const TempDir& dir) {
  const std::string plan = dir.file("plan.json");
  REQUIRE(run_headroom("fit tiny-llama --gpu a6000 -o " + quoted(plan)).exit_code == 0);
  return plan;
}

TEST_CASE("every output path keeps a symbolic link and replaces the file it names") {
  TempDir dir;
  const std::string plan = plan_file(dir);
  for (const OutputCase& c : output_cases()) {
    CAPTURE(c.name);
    const std::string target = dir.file(std::string("target-") + std::to_string(&c - output_cases().data()));
    const std::string link = target + ".link";
    write_text(target, "old");
    fs::create_symlink(target, link);
    const RunOutput run = run_headroom(c.command(link, plan));
    CHECK_MESSAGE(run.exit_code == 0, run.err);
    CHECK(fs::is_symlink(link));
    CHECK(contains(read_text(target), c.contains));
  }
}

TEST_CASE("every output path writes through a FIFO instead of replacing it") {
  TempDir dir;
  const std::string plan = plan_file(dir);
  for (const OutputCase& c : output_cases()) {
    CAPTURE(c.name);
    const std::string fifo = dir.file(std::string("fifo-") + std::to_string(&c - output_cases().data()));
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    std::string received;
    // The reader opens first (blocking until headroom opens the FIFO to write).
    std::thread reader([&] {
      std::ifstream in(fifo, std::ios::binary);
      received.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    });
    RunOutput run;
    for (int attempt = 0; attempt < 100; ++attempt) {  // until the reader's open is in place
      run = run_headroom(c.command(fifo, plan));
      if (run.exit_code == 0 || !contains(run.err, "no process is reading")) break;
    }
    reader.join();
    CHECK_MESSAGE(run.exit_code == 0, run.err);
    CHECK(fs::is_fifo(fifo));
    CHECK(contains(received, c.contains));
  }
}

TEST_CASE("an output FIFO without a reader is an error at once, not a hang") {
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const RunOutput run = run_headroom("plan tiny-llama --gpu a6000 -o " + quoted(fifo));
  CHECK(run.exit_code == 1);
  CHECK(contains(run.err, fifo + ": a FIFO that no process is reading"));
  CHECK(fs::is_fifo(fifo));
}

TEST_CASE("an output character device is written through, not replaced (issue 14: mknod n c 1 3)") {
  TempDir dir;
  const std::string node = dir.file("n");
  if (::mknod(node.c_str(), S_IFCHR | 0666, ::makedev(1, 3)) != 0) {
    MESSAGE("skipped: mknod needs root");
    return;
  }
  const RunOutput run = run_headroom("plan tiny-llama --gpu a6000 -o " + quoted(node));
  CHECK_MESSAGE(run.exit_code == 0, run.err);
  CHECK(fs::is_character_file(node));
}

TEST_CASE("an answer that cannot be written to stdout is a failure (--json > /dev/full)") {
  if (!fs::exists("/dev/full")) {
    MESSAGE("skipped: no /dev/full");
    return;
  }
  for (const char* command : {"fit tiny-llama --gpu a6000 --json", "fit tiny-llama --gpu a6000", "gpus --json"}) {
    CAPTURE(command);
    const RunOutput run = run_headroom(std::string(command) + " >/dev/full");
    CHECK(run.exit_code == 1);
    CHECK(contains(run.err, "standard output: cannot write the answer: No space left on device"));
  }
}

}  // namespace
