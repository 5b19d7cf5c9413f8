// Activation offload: while an OffloadScope is alive on a thread, every tensor
// autograd saves for backward (parameters excepted) is copied to host memory
// and dropped from the device; backward copies it back when it unpacks it.
// On CUDA the copy goes to pinned memory on a side stream, ordered after the
// producing kernel by an event, and the device block is kept from reuse until
// the copy is done (recordStream); on the CPU it is a plain copy (counted, so
// tests can compare offloaded bytes with the planner's). LibTorch's C++ API has
// no saved-tensor hooks, so this installs an autograd Engine whose
// get_default_saved_variable_hooks() hands out these hooks, as PyTorch's Python
// engine does for torch.autograd.graph.saved_tensors_hooks.
#pragma once

#include <torch/csrc/autograd/saved_variable_hooks.h>
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_set>
#include <vector>
#include <utility>

namespace headroom::executor {

struct OffloadStats {
  int64_t packed_tensors = 0;    // distinct tensors copied (a tensor saved by several ops once)
  int64_t packed_bytes = 0;      // bytes copied to the host (whole storages, each once)
  int64_t host_live_bytes = 0;   // host copies not yet unpacked and released
};

// Installs the offloading autograd engine (once per process; idempotent). Must
// run before the first backward of the process.
void install_offload_engine();

class HostCopy;  // offload.cc: one tensor's host copy, shared by its saves

// Offloads the tensors saved while it is alive on this thread. Tensors whose
// storage belongs to `parameters` (data pointers) stay where they are.
class OffloadScope {
 public:
  OffloadScope(OffloadStats& stats, const std::unordered_set<const void*>& parameters);
  ~OffloadScope();
  OffloadScope(const OffloadScope&) = delete;
  OffloadScope& operator=(const OffloadScope&) = delete;

  // Implementation (offload.cc): the host copies made in this scope, by storage.
  struct Entry {
    std::shared_ptr<HostCopy> copy;
    torch::Tensor device;  // the original, held while the scope lives
  };
  using Key = std::pair<const void*, uint32_t>;  // storage data, version
  using CopyMap = std::map<Key, Entry>;

 private:
  OffloadStats* previous_stats_;
  const std::unordered_set<const void*>* previous_parameters_;
  CopyMap* previous_copies_;
  std::unique_ptr<CopyMap> copies_;
};

// A second saved-tensor policy, consulted before offload's while it is
// installed on a thread (ZeRO-3's gathered parameters, executor/zero3_parameters.h):
// for each tensor autograd saves, it gets the hooks offload would use
// (`otherwise`, null outside an OffloadScope) and returns the hooks to use.
class SavedTensorRedirect {
 public:
  virtual ~SavedTensorRedirect() = default;
  virtual std::unique_ptr<torch::autograd::SavedVariableHooks> hooks(
      std::unique_ptr<torch::autograd::SavedVariableHooks> otherwise) = 0;
};

// Installs `redirect` on this thread while alive (the offloading engine too).
class RedirectScope {
 public:
  explicit RedirectScope(SavedTensorRedirect& redirect);
  ~RedirectScope();
  RedirectScope(const RedirectScope&) = delete;
  RedirectScope& operator=(const RedirectScope&) = delete;

 private:
  SavedTensorRedirect* previous_;
};

// Storage data pointers of `module`'s parameters, for OffloadScope.
std::unordered_set<const void*> parameter_storages(torch::nn::Module& module);

}  // namespace headroom::executor
