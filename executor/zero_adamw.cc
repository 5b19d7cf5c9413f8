#include "executor/zero_adamw.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <sstream>
#include <stdexcept>

#include "executor/gradient_all_reduce.h"
#include "executor/sharded_checkpoint.h"
#include "executor/status_error.h"

namespace headroom::executor {
namespace {

// Each parameter's whole shape: at stage 3 its data is empty, its partition knows.
std::vector<std::vector<int64_t>> whole_shapes(const NamedParameters& parameters, const ZeroAdamWOptions& options) {
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < parameters.size(); ++i) {
    shapes.push_back(options.stage == 3 ? options.partitioned.at(i).shape : parameters[i].second.sizes().vec());
  }
  return shapes;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<int64_t> element_counts(const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<int64_t> counts;
  for (const auto& shape : shapes) counts.push_back(numel_of(shape));
  return counts;
}

// Stage 2: tells the optimizer that backward has accumulated a gradient.
class GradientReady final : public torch::autograd::PostAccumulateGradHook {
 public:
  GradientReady(ZeroAdamW& owner, size_t index) : owner_(owner), index_(index) {}
  void operator()(const torch::autograd::Variable& /*tensor*/) override { owner_.gradient_ready(index_); }

 private:
  ZeroAdamW& owner_;
  size_t index_;
};

}  // namespace

ZeroAdamW::ZeroAdamW(NamedParameters parameters, Communicator& communicator, ZeroAdamWOptions options)
    : parameters_(std::move(parameters)),
      shapes_(whole_shapes(parameters_, options)),
      comm_(communicator),
      options_(options),
      // Stage 3: one bucket per parameter (a bucket of 1 element holds only
      // one), so a rank's chunk of each is the parameter's partition.
      layout_(element_counts(shapes_), options.stage == 3 ? 1 : options.bucket_elements, communicator.world_size(),
              communicator.rank()),
      dtype_(parameters_.empty() ? torch::kFloat : parameters_.front().second.scalar_type()),
      device_(parameters_.empty() ? torch::Device(torch::kCPU) : parameters_.front().second.device()) {
  if (options_.stage < 1 || options_.stage > 3) throw std::invalid_argument("ZeroAdamW: stage 1, 2 or 3");
  if (options_.stage == 3) {
    for (size_t i = 0; i < parameters_.size(); ++i) {
      if (options_.partitioned[i].shard.numel() != layout_.buckets()[layout_.bucket_of(i)].chunk) {
        throw std::invalid_argument("ZeroAdamW: the partition of " + parameters_[i].first +
                                    " is not ceil(elements / world) long");
      }
    }
  }
  for (const auto& [name, tensor] : parameters_) {
    if (tensor.scalar_type() != dtype_ || tensor.device() != device_) {
      throw std::invalid_argument("ZeroAdamW: parameter " + name + " has another dtype or device than " +
                                  parameters_.front().first + "; expected one dtype for every trainable parameter");
    }
  }
  torch::NoGradGuard no_grad;
  const int64_t n = layout_.partition_elements();
  const bool keep_master = options_.adam.offload_to_cpu || (options_.adam.master_weights && dtype_ != torch::kFloat);
  const torch::ScalarType state_type = keep_master ? torch::kFloat : dtype_;
  const torch::TensorOptions where = options_.adam.offload_to_cpu
                                         ? torch::TensorOptions().device(torch::kCPU)
                                         : torch::TensorOptions().device(device_);
  if (keep_master) {
    // Pinned where the GPU copies from it; the moments stay pageable (mixed_adamw.cc).
    master_ = torch::empty({n}, where.dtype(torch::kFloat).pinned_memory(options_.adam.offload_to_cpu && device_.is_cuda()));
    master_.copy_(own_parameters());
  }
  exp_avg_ = torch::zeros({n}, where.dtype(state_type));
  exp_avg_sq_ = torch::zeros({n}, where.dtype(state_type));
  pending_.resize(layout_.buckets().size());
  for (size_t b = 0; b < pending_.size(); ++b) pending_[b] = static_cast<int64_t>(layout_.buckets()[b].parameters.size());
  ready_.assign(parameters_.size(), 0);
  if (partitions_gradients()) {
    for (size_t i = 0; i < parameters_.size(); ++i) {
      torch::autograd::impl::set_post_acc_grad_hooks(parameters_[i].second, std::make_unique<GradientReady>(*this, i));
    }
  }
}

ZeroAdamW::~ZeroAdamW() {
  if (!partitions_gradients()) return;
  for (const auto& [name, tensor] : parameters_) torch::autograd::impl::set_post_acc_grad_hooks(tensor, nullptr);
}

void ZeroAdamW::check(const Status& status, const char* what) const {
  if (!status.is_ok()) {
    throw StatusError(status.with_prefix(std::string("ZeRO-") + std::to_string(options_.stage) +
                                         " " + what + ": "));
  }
}

torch::Tensor ZeroAdamW::own_parameters() const {
  torch::Tensor flat = torch::zeros({layout_.partition_elements()}, torch::TensorOptions().dtype(dtype_).device(device_));
  if (options_.stage == 3) {
    for (size_t i = 0; i < parameters_.size(); ++i) {
      const ZeroBucket& bucket = layout_.buckets()[layout_.bucket_of(i)];
      flat.narrow(0, bucket.partition_offset, bucket.chunk).copy_(options_.partitioned[i].shard);
    }
    return flat;
  }
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const OwnedSlice s = layout_.owned(i, layout_.rank());
    if (s.elements == 0) continue;
    flat.narrow(0, s.partition_begin, s.elements)
        .copy_(parameters_[i].second.detach().reshape(-1).narrow(0, s.parameter_begin, s.elements));
  }
  return flat;
}

void ZeroAdamW::ensure_gradient_partition() {
  if (gradients_.defined()) return;
  const int64_t n = layout_.partition_elements();
  gradients_ = options_.adam.offload_to_cpu ? torch::zeros({n}, torch::kFloat)
                                       : torch::zeros({n}, torch::TensorOptions().dtype(dtype_).device(device_));
}

void ZeroAdamW::reduce_bucket(size_t index) {
  torch::NoGradGuard no_grad;
  const ZeroBucket& bucket = layout_.buckets()[index];
  torch::Tensor flat = bucket_gradients(bucket, parameters_, bucket.chunk * layout_.world(),
                                        torch::TensorOptions().dtype(dtype_).device(device_));
  // Stages 2 and 3 hold no whole gradient past its bucket (stage 1 keeps them to zero_grad).
  if (partitions_gradients()) {
    for (size_t k : bucket.parameters) parameters_[k].second.mutable_grad() = torch::Tensor();
  }
  torch::Tensor chunk = torch::empty({bucket.chunk}, flat.options());
  check(comm_.reduce_scatter_sum(flat, chunk), "reduce-scatter of gradients");
  flat = torch::Tensor();
  ensure_gradient_partition();
  gradients_.narrow(0, bucket.partition_offset, bucket.chunk)
      .add_(chunk.to(gradients_.device(), gradients_.scalar_type()));
}

void ZeroAdamW::gradient_ready(size_t index) {
  if (ready_[index]) return;
  ready_[index] = 1;
  const size_t bucket = layout_.bucket_of(index);
  if (--pending_[bucket] == 0) reduce_bucket(bucket);
}

void ZeroAdamW::backward_done() {
  if (!partitions_gradients()) return;
  // A parameter backward gave no gradient (unused this step) leaves its bucket
  // waiting: reduce it with zeros there, in bucket order on every rank.
  for (size_t b = 0; b < pending_.size(); ++b) {
    if (pending_[b] > 0) reduce_bucket(b);
    pending_[b] = static_cast<int64_t>(layout_.buckets()[b].parameters.size());
  }
  std::fill(ready_.begin(), ready_.end(), 0);
}

void ZeroAdamW::publish(const torch::Tensor& partition) {
  torch::NoGradGuard no_grad;
  if (options_.stage == 3) {
    // The partitions are the parameters: nothing to gather until a block runs.
    for (size_t i = 0; i < parameters_.size(); ++i) {
      const ZeroBucket& bucket = layout_.buckets()[layout_.bucket_of(i)];
      options_.partitioned[i].shard.copy_(partition.narrow(0, bucket.partition_offset, bucket.chunk));
    }
    return;
  }
  for (const ZeroBucket& bucket : layout_.buckets()) {
    const torch::Tensor chunk =
        partition.narrow(0, bucket.partition_offset, bucket.chunk).to(device_, dtype_).contiguous();
    torch::Tensor full = torch::empty({bucket.chunk * layout_.world()}, chunk.options());
    check(comm_.all_gather(chunk, full), "all-gather of updated parameters");
    for (size_t j = 0; j < bucket.parameters.size(); ++j) {
      torch::Tensor param = parameters_[bucket.parameters[j]].second.detach();
      param.copy_(full.narrow(0, bucket.offsets[j], param.numel()).view(param.sizes()));
    }
  }
}

bool ZeroAdamW::step(double grad_scale, bool check_finite) {
  torch::NoGradGuard no_grad;
  if (options_.stage == 1) {
    for (size_t b = 0; b < layout_.buckets().size(); ++b) reduce_bucket(b);
  }
  ensure_gradient_partition();
  // The reduce-scatter summed the ranks' gradients; AdamW takes their mean.
  const double scale = grad_scale / layout_.world();
  if (check_finite) {
    const bool finite =
        gradients_.numel() == 0 ||
        torch::isfinite(gradients_.abs().amax().to(torch::kFloat) * scale).all().item<bool>();
    torch::Tensor skipped = torch::full({1}, finite ? 0.0f : 1.0f);
    check(comm_.all_reduce_sum(skipped), "all-reduce of the inf/NaN check");
    if (skipped.item<float>() > 0) {
      if (options_.stage == 1) gradients_ = torch::Tensor();
      return false;
    }
  }
  ++steps_;
  const AdamWHyper& h = options_.adam.hyper;
  if (options_.adam.offload_to_cpu) {
    torch::Tensor half;  // the updated 16-bit partition, when the parameters are 16-bit
    if (dtype_ != torch::kFloat) {
      half = torch::empty({layout_.partition_elements()},
                          torch::TensorOptions().dtype(dtype_).pinned_memory(device_.is_cuda()));
    }
    const torch::Tensor grads = gradients_.contiguous();
    cpu_adamw_step(master_.data_ptr<float>(), exp_avg_.data_ptr<float>(), exp_avg_sq_.data_ptr<float>(),
                   grads.data_ptr(), HalfKind::kNone, static_cast<float>(scale),
                   half.defined() ? half.data_ptr() : nullptr, half.defined() ? half_kind(dtype_) : HalfKind::kNone,
                   layout_.partition_elements(), steps_, h, options_.adam.cpu_threads);
    publish(half.defined() ? half : master_);
  } else {
    // MixedAdamW's update (torch.optim.AdamW), on the partition.
    const torch::Tensor weights = master_.defined() ? master_ : own_parameters();
    torch::Tensor grad = gradients_.to(weights.scalar_type());
    if (scale != 1.0) grad = grad * scale;
    adamw_update(weights, exp_avg_, exp_avg_sq_, grad, h, steps_);
    grad = torch::Tensor();
    publish(weights);
  }
  // Stage 1's partition is a step transient; stage 2's lives to zero_grad.
  if (options_.stage == 1) gradients_ = torch::Tensor();
  return true;
}

void ZeroAdamW::zero_grad() {
  for (auto& [name, tensor] : parameters_) tensor.mutable_grad() = torch::Tensor();
  gradients_ = torch::Tensor();
}

std::vector<std::pair<const char*, torch::Tensor>> ZeroAdamW::states() const {
  std::vector<std::pair<const char*, torch::Tensor>> out = {{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}};
  if (master_.defined()) out.emplace_back("master", master_);
  return out;
}

int64_t ZeroAdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& [key, tensor] : states()) bytes += static_cast<int64_t>(tensor.nbytes());
  return bytes;
}

int64_t ZeroAdamW::checkpoint_bytes() const {
  int64_t elements = 0;
  for (const auto& shape : shapes_) elements += numel_of(shape);
  int64_t per_element = 0;
  for (const auto& [key, tensor] : states()) per_element += static_cast<int64_t>(tensor.element_size());
  return elements * per_element;
}

std::string ZeroAdamW::save() const {
  torch::NoGradGuard no_grad;
  std::vector<ParameterSlice> slices;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const OwnedSlice s = layout_.owned(i, layout_.rank());
    if (s.elements == 0) continue;
    ParameterSlice slice{parameters_[i].first, shapes_[i], s.parameter_begin, {}};
    for (const auto& [key, flat] : states()) slice.states.emplace_back(key, flat.narrow(0, s.partition_begin, s.elements));
    slices.push_back(std::move(slice));
  }
  const std::vector<std::pair<std::string, torch::Tensor>> header = {
      optimizer_kind_marker(planner::OptimizerKind::kAdamW), {"steps", torch::tensor(steps_, torch::kLong)}};
  return write_rank_part(layout_.rank(), layout_.world(), header, slices);
}

bool ZeroAdamW::load_partition(const std::string& bytes, const std::string& origin) {
  torch::NoGradGuard no_grad;
  Result<ReadRankPart> part = read_rank_part(bytes, origin);
  if (!part.is_ok()) throw StatusError(part.status());
  if (part->rank != layout_.rank() || part->world != layout_.world()) return false;
  std::map<std::string, const ParameterSlice*> by_name;
  for (const ParameterSlice& slice : part->slices) by_name[slice.parameter] = &slice;
  // The same layout: exactly this rank's slices, each with every state; else
  // the caller assembles (another bucket size, or other parameters).
  size_t owned = 0;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const OwnedSlice s = layout_.owned(i, layout_.rank());
    if (s.elements == 0) continue;
    ++owned;
    auto found = by_name.find(parameters_[i].first);
    if (found == by_name.end() || found->second->begin != s.parameter_begin || found->second->shape != shapes_[i]) {
      return false;
    }
    for (const auto& [key, flat] : states()) {
      bool present = false;
      for (const auto& [state, tensor] : found->second->states) {
        if (state == key && tensor.numel() == s.elements && tensor.scalar_type() == flat.scalar_type()) present = true;
      }
      if (!present) return false;
    }
  }
  if (owned != part->slices.size()) return false;
  check_optimizer_kind_marker(part->header, planner::OptimizerKind::kAdamW, origin);
  if (!part->header.count("steps"))
    throw StatusError(Status::invalid_input(origin + ": steps: missing"));
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const OwnedSlice s = layout_.owned(i, layout_.rank());
    if (s.elements == 0) continue;
    for (const auto& [key, flat] : states()) {
      for (const auto& [state, tensor] : by_name.at(parameters_[i].first)->states) {
        if (state == key) flat.narrow(0, s.partition_begin, s.elements).copy_(tensor);
      }
    }
  }
  steps_ = part->header.at("steps").item<int64_t>();
  return true;
}

void ZeroAdamW::load(const std::string& bytes, const std::string& origin) {
  torch::NoGradGuard no_grad;
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  check_optimizer_kind(archive, planner::OptimizerKind::kAdamW, origin, /*legacy_ok=*/true);
  torch::Tensor steps = torch::zeros({}, torch::kLong);
  read_state(archive, "steps", steps, origin);
  steps_ = steps.item<int64_t>();
  // Every rank reads the whole state and keeps its partition: any world size.
  for (const auto& [key, flat] : states()) {
    for (size_t i = 0; i < parameters_.size(); ++i) {
      torch::Tensor whole = torch::empty(shapes_[i], torch::TensorOptions().dtype(flat.scalar_type()));
      read_state(archive, parameters_[i].first + "/" + key, whole, origin);
      const OwnedSlice s = layout_.owned(i, layout_.rank());
      if (s.elements == 0) continue;
      flat.narrow(0, s.partition_begin, s.elements).copy_(whole.reshape(-1).narrow(0, s.parameter_begin, s.elements));
    }
  }
}

}  // namespace headroom::executor
