// cli/exit_status.h: the one mapping from an error's kind to the exit status
// (docs/cli.md "Errors and exit status").
#include "cli/exit_status.h"

#include <doctest/doctest.h>

namespace {

using headroom::Status;
using headroom::StatusCode;
using headroom::cli::exit_status;
using headroom::cli::kExitFailure;
using headroom::cli::kExitOk;
using headroom::cli::kExitUsage;

TEST_CASE("the documented statuses") {
  CHECK(kExitOk == 0);
  CHECK(kExitFailure == 1);
  CHECK(kExitUsage == 2);
}

TEST_CASE("invalid input is a usage error, everything else a failure") {
  CHECK(exit_status(StatusCode::kOk) == kExitOk);
  CHECK(exit_status(StatusCode::kInvalidInput) == kExitUsage);
  CHECK(exit_status(StatusCode::kUnsupported) == kExitFailure);
  CHECK(exit_status(StatusCode::kIo) == kExitFailure);
  CHECK(exit_status(StatusCode::kRuntime) == kExitFailure);
  CHECK(exit_status(StatusCode::kInternal) == kExitFailure);
}

TEST_CASE("a Status maps by its code, also after context is added") {
  CHECK(exit_status(Status::ok()) == kExitOk);
  CHECK(exit_status(Status::invalid_input("plan.json: blocks: expected an array")) == kExitUsage);
  CHECK(exit_status(Status::invalid_input("plan.json: no such file").with_prefix("PLAN: ")) ==
        kExitUsage);
  CHECK(exit_status(Status::unsupported("gpu: unknown GPU 'x'")) == kExitFailure);
  CHECK(exit_status(Status::io("out.json: cannot write").with_prefix("-o: ")) == kExitFailure);
  CHECK(exit_status(Status::runtime("step 3: the loss is nan")) == kExitFailure);
  CHECK(exit_status(Status::internal("a bug")) == kExitFailure);
}

}  // namespace
