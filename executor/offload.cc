#include "executor/offload.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/saved_variable_hooks.h>

#include <memory>
#include <optional>

namespace headroom::executor {
namespace {

struct ScopeState {
  OffloadStats* stats = nullptr;
  const std::unordered_set<const void*>* parameters = nullptr;
};

thread_local ScopeState t_state;  // stats == nullptr: no scope

// One saved tensor: the original (parameters, or before packing) or its host copy.
class OffloadHooks final : public torch::autograd::SavedVariableHooks {
 public:
  explicit OffloadHooks(ScopeState state) : state_(state) {}

  void call_pack_hook(const at::Tensor& tensor) override {
    if (!tensor.defined() || state_.parameters->count(tensor.storage().data()) != 0) {
      kept_ = tensor;  // parameters stay resident; offloading them would only add copies
      return;
    }
    device_ = tensor.device();
    bytes_ = static_cast<int64_t>(tensor.numel()) * static_cast<int64_t>(tensor.element_size());
    if (tensor.is_cuda()) {
      pack_cuda(tensor);
    } else {
      host_ = tensor.clone(at::MemoryFormat::Contiguous);
    }
    state_.stats->packed_tensors += 1;
    state_.stats->packed_bytes += bytes_;
    state_.stats->host_live_bytes += bytes_;
    stats_ = state_.stats;
  }

  at::Tensor call_unpack_hook() override {
    if (kept_.defined()) return kept_;
    if (device_.is_cuda()) {
      // The host copy must be complete before the copy back reads it.
      copied_->block(c10::cuda::getCurrentCUDAStream(device_.index()));
      return host_.to(device_, /*non_blocking=*/true);
    }
    return host_;
  }

  ~OffloadHooks() override {
    if (stats_ != nullptr) stats_->host_live_bytes -= bytes_;
  }

 private:
  void pack_cuda(const at::Tensor& tensor) {
    const c10::cuda::CUDAGuard guard(tensor.device());
    static thread_local std::optional<c10::cuda::CUDAStream> side;
    if (!side) side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, tensor.device().index());
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(tensor.device().index());
    at::cuda::CUDAEvent produced;
    produced.record(compute);
    produced.block(*side);
    host_ = at::empty(tensor.sizes(), tensor.options().device(at::kCPU).pinned_memory(true));
    {
      const c10::cuda::CUDAStreamGuard on_side(*side);
      host_.copy_(tensor, /*non_blocking=*/true);
    }
    // The device block returns to the allocator when `tensor` is dropped, but
    // must not be handed out again before the side stream has read it.
    c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(), *side);
    copied_ = std::make_shared<at::cuda::CUDAEvent>();
    copied_->record(*side);
  }

  ScopeState state_;
  at::Tensor kept_;
  at::Tensor host_;
  c10::Device device_ = at::kCPU;
  std::shared_ptr<at::cuda::CUDAEvent> copied_;
  int64_t bytes_ = 0;
  OffloadStats* stats_ = nullptr;
};

struct OffloadEngine final : torch::autograd::Engine {
  std::unique_ptr<torch::autograd::SavedVariableHooks> get_default_saved_variable_hooks() override {
    if (t_state.stats == nullptr) return nullptr;
    return std::make_unique<OffloadHooks>(t_state);
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
    : previous_stats_(t_state.stats), previous_parameters_(t_state.parameters) {
  install_offload_engine();
  t_state = ScopeState{&stats, &parameters};
}

OffloadScope::~OffloadScope() { t_state = ScopeState{previous_stats_, previous_parameters_}; }

std::unordered_set<const void*> parameter_storages(torch::nn::Module& module) {
  std::unordered_set<const void*> out;
  for (const torch::Tensor& p : module.parameters()) out.insert(p.storage().data());
  return out;
}

}  // namespace headroom::executor
