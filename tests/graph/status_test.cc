// graph/status.h: an error's code is decided where it is made and survives
// the context added on its way up.
#include "graph/status.h"

#include <doctest/doctest.h>

#include <string>

namespace {

using headroom::Result;
using headroom::Status;
using headroom::StatusCode;

TEST_CASE("each factory makes an error of its own code") {
  CHECK(Status::ok().is_ok());
  CHECK(Status::ok().code() == StatusCode::kOk);
  CHECK(Status().is_ok());
  const struct {
    Status status;
    StatusCode code;
  } cases[] = {{Status::invalid_input("a"), StatusCode::kInvalidInput},
               {Status::unsupported("b"), StatusCode::kUnsupported},
               {Status::io("c"), StatusCode::kIo},
               {Status::runtime("d"), StatusCode::kRuntime},
               {Status::internal("e"), StatusCode::kInternal},
               {Status::with_code(StatusCode::kIo, "f"), StatusCode::kIo}};
  for (const auto& c : cases) {
    CAPTURE(headroom::status_code_name(c.code));
    CHECK_FALSE(c.status.is_ok());
    CHECK(c.status.code() == c.code);
  }
  CHECK(Status::unsupported("unknown GPU 'x'").message() == "unknown GPU 'x'");
}

TEST_CASE("with_prefix and with_suffix add context and keep the code") {
  const Status read = Status::invalid_input("plan.json: blocks: expected 6 entries");
  const Status shown = read.with_prefix("PLAN: ").with_suffix(" (see docs)");
  CHECK(shown.code() == StatusCode::kInvalidInput);
  CHECK(shown.message() == "PLAN: plan.json: blocks: expected 6 entries (see docs)");
  CHECK(read.message() == "plan.json: blocks: expected 6 entries");  // the original is unchanged

  const Status written =
      Status::io("out.json: cannot write: No space left on device").with_prefix("-o: ");
  CHECK(written.code() == StatusCode::kIo);
  CHECK(written.message() == "-o: out.json: cannot write: No space left on device");

  // Context on an ok Status leaves it ok, with no message.
  CHECK(Status::ok().with_prefix("PLAN: ").is_ok());
  CHECK(Status::ok().with_prefix("PLAN: ").message().empty());
}

TEST_CASE("a Result keeps its error's code") {
  const Result<int> failed = Status::unsupported("model: unknown model 'x'");
  CHECK_FALSE(failed.is_ok());
  CHECK(failed.code() == StatusCode::kUnsupported);
  CHECK(failed.status().with_prefix("PLAN: ").code() == StatusCode::kUnsupported);
  const Result<int> value = 3;
  CHECK(value.is_ok());
  CHECK(value.code() == StatusCode::kOk);
}

TEST_CASE("every code has a name") {
  for (StatusCode code : {StatusCode::kOk, StatusCode::kInvalidInput, StatusCode::kUnsupported,
                          StatusCode::kIo, StatusCode::kRuntime, StatusCode::kInternal}) {
    CAPTURE(static_cast<int>(code));
    CHECK(headroom::status_code_name(code) != "unknown");
  }
  CHECK(headroom::status_code_name(StatusCode::kInvalidInput) == "invalid input");
}

}  // namespace
