// The one seam to ProcessGroupGloo: its header needs gloo's headers, which the
// PyPI torch wheel does not ship (its libtorch_cpu.so has gloo compiled in), so
// only executor/gloo_backend.cc includes it, with Debian's libgloo-dev headers;
// the rest of the executor sees a c10d::Backend.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

namespace headroom::executor {

// A Gloo backend of `size` ranks over `store`, every collective bounded by
// `timeout`; its TCP transport bound to the loopback address when the job is on
// one machine, else to the address this host's name resolves to.
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int size, std::chrono::milliseconds timeout, bool one_machine);

}  // namespace headroom::executor
