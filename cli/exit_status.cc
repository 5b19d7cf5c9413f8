#include "cli/exit_status.h"

namespace headroom::cli {

int exit_status(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return kExitOk;
    case StatusCode::kInvalidInput:
      return kExitUsage;
    case StatusCode::kUnsupported:
    case StatusCode::kIo:
    case StatusCode::kRuntime:
    case StatusCode::kInternal:
      return kExitFailure;
  }
  return kExitFailure;
}

}  // namespace headroom::cli
