#include "executor/gloo_backend.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

namespace headroom::executor {

// Everything called here is defined in libtorch_cpu.so (the constructors and
// createDeviceForHostname); nothing of gloo is compiled into this file, so the
// headers' version only has to declare what libtorch exports. The
// gloo_backend_symbols test holds that: this object defines no gloo:: symbol.
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int size, std::chrono::milliseconds timeout, bool one_machine) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(one_machine ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                         : c10d::ProcessGroupGloo::createDefaultDevice());
  options->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}

}  // namespace headroom::executor
