#include "executor/zero3_parameters.h"

#include <algorithm>
#include <stdexcept>

#include "executor/status_error.h"

namespace headroom::executor {
namespace {

namespace tm = models::torch_modules;

// A saved tensor: a view of a gathered parameter is kept as the parameter and
// the view's geometry, and rebuilt over the parameter gathered again in
// backward; anything else goes to `otherwise` (offload's hooks) or is kept.
class GatheredViewHooks final : public torch::autograd::SavedVariableHooks {
 public:
  GatheredViewHooks(Zero3Parameters& owner, std::unique_ptr<torch::autograd::SavedVariableHooks> otherwise)
      : owner_(owner), otherwise_(std::move(otherwise)) {}

  void call_pack_hook(const at::Tensor& tensor) override {
    param_ = tensor.defined() ? owner_.param_of_storage(tensor.storage().data()) : -1;
    if (param_ < 0) {
      if (otherwise_) {
        otherwise_->call_pack_hook(tensor);
      } else {
        // Detached: a saved output holding its own grad_fn would be a cycle;
        // unpacking gives it back its autograd metadata.
        kept_ = tensor.defined() ? tensor.detach() : tensor;
      }
      return;
    }
    like_ = at::empty({0}, tensor.options());
    sizes_ = tensor.sizes().vec();
    strides_ = tensor.strides().vec();
    offset_ = tensor.storage_offset();
  }

  at::Tensor call_unpack_hook() override {
    if (param_ < 0) return otherwise_ ? otherwise_->call_unpack_hook() : kept_;
    const torch::Tensor gathered = owner_.gathered_storage_of(param_);
    return at::empty({0}, like_.options()).set_(gathered.storage(), offset_, sizes_, strides_);
  }

 private:
  Zero3Parameters& owner_;
  std::unique_ptr<torch::autograd::SavedVariableHooks> otherwise_;
  int param_ = -1;
  at::Tensor kept_;
  at::Tensor like_;
  std::vector<int64_t> sizes_;
  std::vector<int64_t> strides_;
  int64_t offset_ = 0;
};

}  // namespace

Zero3Parameters::Zero3Parameters(torch::nn::Module& module, const std::map<std::string, std::vector<int>>& block_of,
                                 std::vector<std::string> blocks, Communicator& communicator, Zero3Options options)
    : comm_(communicator), options_(options), blocks_(std::move(blocks)), params_of_block_(blocks_.size()),
      needs_backward_(blocks_.size(), 0) {
  for (size_t b = 0; b < blocks_.size(); ++b) block_index_[blocks_[b]] = static_cast<int>(b);
  torch::NoGradGuard no_grad;
  const int world = comm_.world_size();
  const int rank = comm_.rank();
  // named_parameters() lists a tied parameter once per name; it is one partition.
  std::map<const void*, int> seen;
  for (const auto& item : module.named_parameters()) {
    const auto found = block_of.find(item.key());
    if (found == block_of.end() || found->second.empty()) {
      throw std::invalid_argument("ZeRO-3: parameter " + item.key() + " belongs to no block of the graph");
    }
    const void* impl = item.value().unsafeGetTensorImpl();
    if (seen.count(impl)) {
      Param& shared = params_[static_cast<size_t>(seen[impl])];
      for (int b : found->second) shared.blocks.push_back(b);
      for (int b : found->second) params_of_block_[static_cast<size_t>(b)].push_back(seen[impl]);
      continue;
    }
    Param p;
    p.tensor = item.value();
    p.shape = p.tensor.sizes().vec();
    p.numel = p.tensor.numel();
    p.chunk = (p.numel + world - 1) / world;
    p.shard = torch::zeros({p.chunk}, p.tensor.options().requires_grad(false));
    const int64_t begin = std::min<int64_t>(p.numel, rank * p.chunk);
    const int64_t end = std::min<int64_t>(p.numel, begin + p.chunk);
    if (end > begin) p.shard.narrow(0, 0, end - begin).copy_(p.tensor.detach().reshape(-1).narrow(0, begin, end - begin));
    p.blocks = found->second;
    // DeepSpeed's free_param: the parameter keeps its identity (autograd,
    // the optimizer's list), its data goes.
    p.tensor.set_data(torch::empty({0}, p.tensor.options()));
    const int index = static_cast<int>(params_.size());
    seen[impl] = index;
    for (int b : p.blocks) params_of_block_[static_cast<size_t>(b)].push_back(index);
    params_.push_back(std::move(p));
  }
}

Zero3Parameters::~Zero3Parameters() = default;

int64_t Zero3Parameters::partition_bytes() const {
  int64_t bytes = 0;
  for (const Param& p : params_) bytes += static_cast<int64_t>(p.shard.nbytes());
  return bytes;
}

PartitionedParameter Zero3Parameters::partition_of(const torch::Tensor& parameter) const {
  for (const Param& p : params_) {
    if (p.tensor.unsafeGetTensorImpl() == parameter.unsafeGetTensorImpl()) return PartitionedParameter{p.shard, p.shape};
  }
  throw std::invalid_argument("ZeRO-3: a trainable parameter that is not partitioned");
}

void Zero3Parameters::gather(int index) {
  Param& p = params_[static_cast<size_t>(index)];
  if (p.gathered.defined()) return;
  torch::NoGradGuard no_grad;
  p.gathered = torch::empty({p.chunk * comm_.world_size()}, p.shard.options());
  if (Status s = comm_.all_gather(p.shard, p.gathered); !s.is_ok()) {
    p.gathered = torch::Tensor();
    throw StatusError(s.with_prefix("ZeRO-3 all-gather of parameters: "));
  }
  p.tensor.set_data(p.gathered.narrow(0, 0, p.numel).view(p.shape));
  by_storage_[p.gathered.storage().data()] = index;
  ++stats_.gathers;
  live_elements_ += p.gathered.numel();
  stats_.live_bytes += static_cast<int64_t>(p.gathered.nbytes());
  stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
}

void Zero3Parameters::release(int index) {
  Param& p = params_[static_cast<size_t>(index)];
  if (!p.gathered.defined()) return;
  torch::NoGradGuard no_grad;
  by_storage_.erase(p.gathered.storage().data());
  live_elements_ -= p.gathered.numel();
  stats_.live_bytes -= static_cast<int64_t>(p.gathered.nbytes());
  p.tensor.set_data(torch::empty({0}, p.shard.options()));
  p.gathered = torch::Tensor();
}

void Zero3Parameters::ensure(int block) {
  for (int index : params_of_block_[static_cast<size_t>(block)]) gather(index);
}

// partitioned_param_coordinator.py fetch_sub_module: parameters of the next
// sub-module are prefetched while the numel in flight stays within
// prefetch_bucket_sz and the available numel within max_available_parameters_in_numel.
void Zero3Parameters::prefetch(int block) {
  if (block < 0) return;
  int64_t budget = options_.prefetch_elements;
  for (int index : params_of_block_[static_cast<size_t>(block)]) {
    const Param& p = params_[static_cast<size_t>(index)];
    if (p.gathered.defined()) continue;
    const int64_t elements = p.chunk * comm_.world_size();
    if (elements > budget || live_elements_ + elements > options_.max_live_elements) break;
    budget -= elements;
    gather(index);
  }
}

void Zero3Parameters::release_except(const std::set<int>& keep) {
  for (size_t i = 0; i < params_.size(); ++i) {
    const Param& p = params_[i];
    if (!p.gathered.defined()) continue;
    const bool kept = std::any_of(p.blocks.begin(), p.blocks.end(), [&](int b) { return keep.count(b) != 0; });
    if (!kept) release(static_cast<int>(i));
  }
}

// The block after `block` in forward order (step +1), or the one before it
// whose backward runs (step -1); -1 when none.
int Zero3Parameters::next_block(int block, int step) const {
  for (int b = block + step; b >= 0 && b < static_cast<int>(blocks_.size()); b += step) {
    if (params_of_block_[static_cast<size_t>(b)].empty()) continue;
    if (step < 0 && !needs_backward_[static_cast<size_t>(b)]) continue;
    return b;
  }
  return -1;
}

int Zero3Parameters::param_of_storage(const void* data) const {
  const auto found = by_storage_.find(data);
  return found == by_storage_.end() ? -1 : found->second;
}

torch::Tensor Zero3Parameters::gathered_storage_of(int index) {
  Param& p = params_[static_cast<size_t>(index)];
  if (!p.gathered.defined()) {
    ++stats_.late_gathers;
    gather(index);
  }
  return p.gathered;
}

void Zero3Parameters::before_backward(int block) {
  // Backward runs the blocks in reverse; a later block's signal is stale.
  if (block > backward_block_) return;
  backward_block_ = block;
  const int previous = next_block(block, -1);
  release_except({block, previous});
  ensure(block);
  prefetch(previous);
}

void Zero3Parameters::backward_done() {
  release_except({});
  std::fill(needs_backward_.begin(), needs_backward_.end(), 0);
  backward_block_ = static_cast<int>(blocks_.size());
}

std::unique_ptr<torch::autograd::SavedVariableHooks> Zero3Parameters::hooks(
    std::unique_ptr<torch::autograd::SavedVariableHooks> otherwise) {
  return std::make_unique<GatheredViewHooks>(*this, std::move(otherwise));
}

tm::BlockRunner Zero3Parameters::runner(tm::BlockRunner inner) {
  return [this, inner](const std::string& name, torch::nn::Module& module, const tm::BlockFn& fn,
                       const std::vector<torch::Tensor>& inputs) {
    const auto found = block_index_.find(name);
    if (found == block_index_.end()) throw std::logic_error("ZeRO-3: block " + name + " is not in the plan");
    const int block = found->second;
    const int next = next_block(block, +1);
    release_except({block, next});
    ensure(block);
    prefetch(next);
    std::vector<torch::Tensor> outputs;
    {
      const RedirectScope redirect(*this);
      outputs = inner ? inner(name, module, fn, inputs) : fn(inputs);
    }
    release_except({next});
    // DeepSpeed's pre-backward hook (parameter_offload.py
    // _register_hooks_recursively, PreBackwardFunctionForModule): before the
    // block's backward, when the gradient of its outputs is ready.
    // An output that is one of the inputs passed through gets its gradient only
    // after this block's backward: it is no signal for it.
    bool hooked = false;
    for (torch::Tensor& out : outputs) {
      if (!out.defined() || !out.requires_grad()) continue;
      const bool passed_through = std::any_of(inputs.begin(), inputs.end(), [&](const torch::Tensor& in) {
        return in.defined() && in.unsafeGetTensorImpl() == out.unsafeGetTensorImpl();
      });
      if (passed_through) continue;
      hooked = true;
      out.register_hook([this, block](const torch::Tensor& grad) {
        before_backward(block);
        return grad;
      });
    }
    needs_backward_[static_cast<size_t>(block)] = hooked ? 1 : 0;
    return outputs;
  };
}

std::unique_ptr<Zero3Parameters> partition_parameters(torch::nn::Module& module, const graph::LayerGraph& graph,
                                                      const planner::Plan& plan, Communicator& communicator) {
  std::map<std::string, std::vector<int>> block_of;
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& param : node.params) {
      std::vector<int>& blocks = block_of[param.name];
      if (std::find(blocks.begin(), blocks.end(), node.block) == blocks.end()) blocks.push_back(node.block);
    }
  }
  std::vector<std::string> blocks;
  for (const graph::Block& block : graph.blocks) blocks.push_back(block.name);
  Zero3Options options;
  options.prefetch_elements = plan.settings.prefetch_bucket_elements;
  options.max_live_elements = plan.settings.max_live_parameters;
  return std::make_unique<Zero3Parameters>(module, block_of, std::move(blocks), communicator, options);
}

}  // namespace headroom::executor
