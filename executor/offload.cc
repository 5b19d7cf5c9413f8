#include "executor/offload.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/saved_variable_hooks.h>

#include <map>
#include <memory>
#include <optional>
#include <utility>

namespace headroom::executor {

// One device storage's host copy, shared by every saved view of it within a
// scope: ops save different views of the same memory (SDPA its output, the
// output projection the same memory reshaped; q, k and v projections one
// input), and the caching allocator frees the storage only as a whole, so the
// storage is what moves. Unpacking views the copy with each save's own
// sizes, strides and offset; on CUDA the views share one device copy.
class HostCopy {
 public:
  HostCopy(const at::Tensor& tensor, OffloadStats* stats) : device_(tensor.device()), stats_(stats) {
    const c10::Storage& storage = tensor.storage();
    bytes_ = static_cast<int64_t>(storage.nbytes());
    const at::Tensor raw = bytes_of(storage, tensor.options());
    if (tensor.is_cuda()) {
      pack_cuda(raw);
    } else {
      host_ = raw.clone();
    }
    stats_->packed_tensors += 1;
    stats_->packed_bytes += bytes_;
    stats_->host_live_bytes += bytes_;
  }
  ~HostCopy() { stats_->host_live_bytes -= bytes_; }
  HostCopy(const HostCopy&) = delete;
  HostCopy& operator=(const HostCopy&) = delete;

  // The saved view, rebuilt over the host copy (CPU) or a device copy of it.
  at::Tensor unpack(const at::Tensor& like, c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset) {
    c10::Storage storage = host_.storage();
    if (device_.is_cuda()) {
      if (auto alive = device_copy_.lock()) {
        storage = c10::Storage(std::move(alive));
      } else {
        // The host copy must be complete before the copy back reads it.
        copied_->block(c10::cuda::getCurrentCUDAStream(device_.index()));
        storage = host_.to(device_, /*non_blocking=*/true).storage();
        device_copy_ = storage.getWeakStorageImpl();
      }
    }
    return at::empty({0}, like.options().device(storage.device())).set_(storage, offset, sizes, strides);
  }

 private:
  // The whole storage as a flat byte tensor.
  static at::Tensor bytes_of(const c10::Storage& storage, const at::TensorOptions& options) {
    return at::empty({0}, options.dtype(at::kByte)).set_(storage, 0, {static_cast<int64_t>(storage.nbytes())}, {1});
  }

  void pack_cuda(const at::Tensor& raw) {
    const c10::cuda::CUDAGuard guard(raw.device());
    static thread_local std::optional<c10::cuda::CUDAStream> side;
    if (!side) side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, raw.device().index());
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(raw.device().index());
    at::cuda::CUDAEvent produced;
    produced.record(compute);
    produced.block(*side);
    host_ = at::empty(raw.sizes(), raw.options().device(at::kCPU).pinned_memory(true));
    {
      const c10::cuda::CUDAStreamGuard on_side(*side);
      host_.copy_(raw, /*non_blocking=*/true);
    }
    // The device block returns to the allocator when the last view is dropped,
    // but must not be handed out again before the side stream has read it.
    c10::cuda::CUDACachingAllocator::recordStream(raw.storage().data_ptr(), *side);
    copied_ = std::make_unique<at::cuda::CUDAEvent>();
    copied_->record(*side);
  }

  c10::Device device_;
  OffloadStats* stats_;
  int64_t bytes_ = 0;
  at::Tensor host_;  // flat bytes
  std::unique_ptr<at::cuda::CUDAEvent> copied_;
  // The device copy while some unpacked view still uses it, so that views
  // unpacked one after another share it.
  c10::weak_intrusive_ptr<c10::StorageImpl> device_copy_{c10::intrusive_ptr<c10::StorageImpl>()};
};

namespace {

struct ScopeState {
  OffloadStats* stats = nullptr;
  const std::unordered_set<const void*>* parameters = nullptr;
  // Host copies made in this scope, by the memory they read and its version (an
  // in-place update after a save makes a new version).
  OffloadScope::CopyMap* copies = nullptr;
};

thread_local ScopeState t_state;  // stats == nullptr: no scope
thread_local SavedTensorRedirect* t_redirect = nullptr;

// One saved tensor: the original (parameters) or its shared host copy.
class OffloadHooks final : public torch::autograd::SavedVariableHooks {
 public:
  explicit OffloadHooks(ScopeState state) : state_(state) {}

  void call_pack_hook(const at::Tensor& tensor) override {
    if (!tensor.defined() || state_.parameters->count(tensor.storage().data()) != 0) {
      kept_ = tensor;  // parameters stay resident; offloading them would only add copies
      return;
    }
    // Known by the storage it views (and the version: an in-place update after
    // a save makes a new one).
    OffloadScope::Key key{tensor.storage().data(), tensor._version()};
    OffloadScope::Entry& entry = (*state_.copies)[key];
    if (!entry.copy) {
      entry.copy = std::make_shared<HostCopy>(tensor, state_.stats);
      // Held until the scope ends, so that no later tensor of this block can
      // reuse the address (and the key) while the map lives; in-block device
      // memory is then what keeping the block would cost, and all of it leaves
      // the device when the block's forward is done.
      entry.device = tensor;
    }
    copy_ = entry.copy;
    like_ = at::empty({0}, tensor.options().device(at::kCPU));
    sizes_ = tensor.sizes().vec();
    strides_ = tensor.strides().vec();
    offset_ = tensor.storage_offset();
  }

  at::Tensor call_unpack_hook() override {
    return kept_.defined() ? kept_ : copy_->unpack(like_, sizes_, strides_, offset_);
  }

 private:
  ScopeState state_;
  at::Tensor kept_;
  std::shared_ptr<HostCopy> copy_;
  at::Tensor like_;  // an empty tensor with the saved one's dtype
  std::vector<int64_t> sizes_;
  std::vector<int64_t> strides_;
  int64_t offset_ = 0;
};

struct OffloadEngine final : torch::autograd::Engine {
  std::unique_ptr<torch::autograd::SavedVariableHooks> get_default_saved_variable_hooks() override {
    std::unique_ptr<torch::autograd::SavedVariableHooks> offload;
    if (t_state.stats != nullptr) offload = std::make_unique<OffloadHooks>(t_state);
    if (t_redirect != nullptr) return t_redirect->hooks(std::move(offload));
    return offload;
  }
  static torch::autograd::Engine& instance() {
    static OffloadEngine engine;
    return engine;
  }
};

}  // namespace

void install_offload_engine() {
  static const bool installed = [] {
    torch::autograd::set_default_engine_stub(&OffloadEngine::instance);
    return true;
  }();
  (void)installed;
}

OffloadScope::OffloadScope(OffloadStats& stats, const std::unordered_set<const void*>& parameters)
    : previous_stats_(t_state.stats),
      previous_parameters_(t_state.parameters),
      previous_copies_(t_state.copies),
      copies_(std::make_unique<CopyMap>()) {
  install_offload_engine();
  t_state = ScopeState{&stats, &parameters, copies_.get()};
}

OffloadScope::~OffloadScope() { t_state = ScopeState{previous_stats_, previous_parameters_, previous_copies_}; }

RedirectScope::RedirectScope(SavedTensorRedirect& redirect) : previous_(t_redirect) {
  install_offload_engine();
  t_redirect = &redirect;
}

RedirectScope::~RedirectScope() { t_redirect = previous_; }

std::unordered_set<const void*> parameter_storages(torch::nn::Module& module) {
  std::unordered_set<const void*> out;
  for (const torch::Tensor& p : module.parameters()) out.insert(p.storage().data());
  return out;
}

}  // namespace headroom::executor
