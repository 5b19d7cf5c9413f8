// A Status thrown where no Status can be returned: from autograd hooks and
// the optimizers' state loaders, which run inside LibTorch's call stacks.
// train_plan() catches it and returns the Status, its code kept (any other
// exception becomes kRuntime or kInternal there).
#pragma once

#include <stdexcept>
#include <utility>

#include "graph/status.h"

namespace headroom::executor {

class StatusError : public std::runtime_error {
 public:
  explicit StatusError(Status status)
      : std::runtime_error(status.message()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

}  // namespace headroom::executor
