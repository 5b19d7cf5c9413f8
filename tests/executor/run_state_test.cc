// run.json, the trainer's run state in each checkpoint: written and read back,
// and hostile or stale ones refused naming the file and the field (issue 14:
// a deep or overflowing run.json, a version or step that does not match, a
// checkpoint of a model that changed under the same path).
#include "executor/run_state.h"

#include <doctest/doctest.h>

#include <string>

namespace headroom::executor {
namespace {

using nlohmann::json;

constexpr const char* kOrigin = "ckpt/step-00000006/run.json";

RunState sample_state() {
  RunState state;
  state.step = 6;
  state.identity = {{"model", "tiny-llama"}, {"seed", 0}, {"parameters", "crc32c 1234abcd of 20 tensors"}};
  state.loss_scale = 32768;
  state.clean_steps = 3;
  return state;
}

std::string error_of(const std::string& text, int64_t step = 6) {
  Result<RunState> r = parse_run_state(text, kOrigin, step);
  REQUIRE_FALSE(r.is_ok());
  return r.message();
}

std::string edited(const std::string& key, const json& value) {
  json run = json::parse(run_state_text(sample_state()));
  run[key] = value;
  return run.dump();
}

}  // namespace

TEST_CASE("a run state reads back as written") {
  Result<RunState> r = parse_run_state(run_state_text(sample_state()), kOrigin, 6);
  REQUIRE_MESSAGE(r.is_ok(), r.message());
  CHECK(r->step == 6);
  CHECK(r->identity == sample_state().identity);
  CHECK(r->loss_scale == 32768);
  CHECK(r->clean_steps == 3);
}

TEST_CASE("run.json's version, step and types are checked, naming the field") {
  CHECK(error_of(run_state_text(sample_state()), 7) ==
        std::string(kOrigin) + ": step: expected 7, the step of the checkpoint that holds it, got 6");
  CHECK(error_of(edited("version", 2)).find(std::string(kOrigin) + ": version: expected 1") == 0);
  CHECK(error_of(edited("format", 1)).find(std::string(kOrigin) + ": format: expected \"headroom.run_state\"") == 0);
  CHECK(error_of(edited("loss_scale", "big")).find(std::string(kOrigin) + ": loss_scale: expected a positive number") ==
        0);
  CHECK(error_of(edited("loss_scale", 0)).find("loss_scale") != std::string::npos);
  CHECK(error_of(edited("clean_steps", -1)).find("clean_steps: expected an integer >= 0") != std::string::npos);
  CHECK(error_of(edited("clean_steps", 1.5)).find("clean_steps") != std::string::npos);
  CHECK(error_of(edited("identity", "x")).find("identity: expected an object") != std::string::npos);
  CHECK(error_of(edited("extra", 1)).find(std::string(kOrigin) + ": extra: unknown key") == 0);
  json missing = json::parse(run_state_text(sample_state()));
  missing.erase("loss_scale");
  CHECK(error_of(missing.dump()) == std::string(kOrigin) + ": loss_scale: missing");
}

TEST_CASE("hostile run.json text: deep nesting, 1e400, duplicate keys, not JSON") {
  CHECK(error_of(std::string(60000, '[') + std::string(60000, ']')) ==
        std::string(kOrigin) + ": JSON nested deeper than 64 levels (expected a flatter file)");
  CHECK(error_of(R"({"loss_scale": 1e400})").find(std::string(kOrigin) + ": loss_scale: number overflow") == 0);
  CHECK(error_of(R"({"step": 6, "step": 7})").find("step: duplicate key") != std::string::npos);
  CHECK(error_of("not json").find("invalid JSON") != std::string::npos);
  CHECK(error_of("[]").find("(top level)") != std::string::npos);
}

TEST_CASE("a checkpoint of another run or another model is refused, naming what differs") {
  const json saved = sample_state().identity;
  CHECK(check_identity(saved, saved, kOrigin).is_ok());
  json changed = saved;
  changed["parameters"] = "crc32c 99999999 of 19 tensors";  // e.g. tie_word_embeddings false -> true
  const Status status = check_identity(saved, changed, kOrigin);
  REQUIRE_FALSE(status.is_ok());
  CHECK(status.message() == std::string(kOrigin) +
                                ": identity: written by another run (parameters \"crc32c 1234abcd of 20 tensors\" in "
                                "the checkpoint, \"crc32c 99999999 of 19 tensors\" in this run); expected a "
                                "checkpoint of this plan, model and options");
  json older = saved;
  older.erase("parameters");  // a checkpoint from before the digest
  CHECK(check_identity(older, saved, kOrigin).message().find("parameters (absent) in the checkpoint") !=
        std::string::npos);
}

TEST_CASE("the identity names samples per step, so a checkpoint resumes on another number of ranks") {
  json now = sample_state().identity;
  now["micro_batch"] = 2;
  now["samples_per_step"] = 8;  // e.g. 2 ranks x 2 micro-steps x 2 samples, or 1 process x 4 x 2
  // A checkpoint from before several ranks names grad_accum: one process.
  json older = now;
  older.erase("samples_per_step");
  older["grad_accum"] = 4;
  CHECK(check_identity(older, now, kOrigin).is_ok());
  older["grad_accum"] = 2;
  CHECK(check_identity(older, now, kOrigin).message().find("samples_per_step 4 in the checkpoint, 8 in this run") !=
        std::string::npos);
}

}  // namespace headroom::executor
