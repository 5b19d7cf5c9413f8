#include "executor/mixed_adamw.h"

#include <torch/cuda.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace headroom::executor {
HalfKind half_kind(torch::ScalarType type) {
  if (type == torch::kBFloat16) return HalfKind::kBf16;
  if (type == torch::kHalf) return HalfKind::kFp16;
  return HalfKind::kNone;
}

void adamw_update(const torch::Tensor& weights, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq,
                  const torch::Tensor& grad, const AdamWHyper& h, int64_t step) {
  const double bias1 = 1 - std::pow(h.beta1, static_cast<double>(step));
  const double bias2 = 1 - std::pow(h.beta2, static_cast<double>(step));
  weights.mul_(1 - h.lr * h.weight_decay);
  exp_avg.lerp_(grad, 1 - h.beta1);
  exp_avg_sq.mul_(h.beta2).addcmul_(grad, grad, 1 - h.beta2);
  const torch::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(bias2)).add_(h.eps);
  weights.addcdiv_(exp_avg, denom, -h.lr / bias1);
}

namespace {

torch::TensorOptions host_f32(const torch::Tensor& like) {
  return torch::TensorOptions().dtype(torch::kFloat).device(torch::kCPU).pinned_memory(like.is_cuda());
}

}  // namespace

// One trainable parameter and its optimizer state.
struct MixedAdamW::Slot {
  std::string name;
  torch::Tensor param;       // the model's tensor (device, training dtype)
  torch::Tensor master;      // fp32 master weights, when kept (device or host)
  torch::Tensor exp_avg;     // fp32 (or the parameter's dtype without master weights), device or host
  torch::Tensor exp_avg_sq;
  torch::Tensor host_grad;   // offload from a GPU: fp32 gradient accumulated on the host
  torch::Tensor host_param;  // offload from a GPU: updated 16-bit copy to upload (pinned)
};

namespace {

// ZeRO-Offload moves each gradient to the host as soon as backward has
// accumulated it, so the device never holds all gradients at once (the
// planner counts none on the GPU): add it into the fp32 host buffer and drop it.
class GradToHost final : public torch::autograd::PostAccumulateGradHook {
 public:
  explicit GradToHost(torch::Tensor host) : host_(std::move(host)) {}
  void operator()(const torch::autograd::Variable& tensor) override {
    torch::Tensor& grad = const_cast<torch::autograd::Variable&>(tensor).mutable_grad();
    if (!grad.defined()) return;
    host_.add_(grad.to(torch::kCPU, torch::kFloat));
    grad = torch::Tensor();
  }

 private:
  torch::Tensor host_;
};

}  // namespace

MixedAdamW::MixedAdamW(std::vector<std::pair<std::string, torch::Tensor>> parameters, MixedAdamWOptions options)
    : options_(options) {
  torch::NoGradGuard no_grad;
  for (auto& [name, param] : parameters) {
    auto slot = std::make_unique<Slot>();
    slot->name = name;
    slot->param = param;
    const bool master = options_.master_weights && param.scalar_type() != torch::kFloat;
    if (options_.offload_to_cpu) {
      // The host always keeps fp32 master weights (Ren et al. 2021, Sec. 4.1).
      slot->master = torch::empty(param.sizes(), host_f32(param));
      slot->master.copy_(param);
      // Only buffers that DMA touches are pinned: the caching host allocator
      // rounds pinned blocks up to powers of two and keeps them.
      const auto pageable = torch::TensorOptions().dtype(torch::kFloat);
      slot->exp_avg = torch::zeros(param.sizes(), pageable);
      slot->exp_avg_sq = torch::zeros(param.sizes(), pageable);
      if (param.is_cuda()) {
        slot->host_grad = torch::zeros(param.sizes(), pageable);
        if (param.scalar_type() != torch::kFloat) {
          slot->host_param = torch::empty(param.sizes(), param.options().device(torch::kCPU).pinned_memory(true));
        }
        torch::autograd::impl::set_post_acc_grad_hooks(param, std::make_unique<GradToHost>(slot->host_grad));
      }
    } else {
      if (master) slot->master = param.detach().to(torch::kFloat).clone();
      const auto state_options = master ? param.options().dtype(torch::kFloat) : param.options();
      slot->exp_avg = torch::zeros(param.sizes(), state_options);
      slot->exp_avg_sq = torch::zeros(param.sizes(), state_options);
    }
    slots_.push_back(std::move(slot));
  }
}

MixedAdamW::~MixedAdamW() {
  for (const auto& slot : slots_) {
    if (slot->host_grad.defined()) torch::autograd::impl::set_post_acc_grad_hooks(slot->param, nullptr);
  }
}

bool MixedAdamW::grads_finite(double grad_scale) const {
  std::vector<torch::Tensor> maxima;
  for (const auto& slot : slots_) {
    const torch::Tensor& g = slot->host_grad.defined() ? slot->host_grad : slot->param.grad();
    if (g.defined()) maxima.push_back(g.abs().amax().to(torch::kFloat).cpu().reshape({1}));
  }
  if (maxima.empty()) return true;
  return torch::isfinite(torch::cat(maxima) * grad_scale).all().item<bool>();
}

bool MixedAdamW::step(double grad_scale, bool check_finite) {
  torch::NoGradGuard no_grad;
  // The previous step's uploads read the host buffers this step rewrites.
  if (options_.offload_to_cpu && !slots_.empty() && slots_.front()->param.is_cuda()) torch::cuda::synchronize();
  if (check_finite && !grads_finite(grad_scale)) return false;
  ++steps_;
  const AdamWHyper& h = options_.hyper;
  for (const auto& slot : slots_) {
    if (options_.offload_to_cpu) {
      torch::Tensor grad = slot->host_grad.defined() ? slot->host_grad : slot->param.grad();
      if (!grad.defined()) continue;
      grad = grad.contiguous();
      const bool upload = slot->param.is_cuda();
      // On the CPU the parameter itself is the 16-bit output; from a GPU a pinned copy is uploaded.
      torch::Tensor out = upload ? slot->host_param : slot->param;
      const HalfKind out_kind = out.defined() ? half_kind(out.scalar_type()) : HalfKind::kNone;
      cpu_adamw_step(slot->master.data_ptr<float>(), slot->exp_avg.data_ptr<float>(),
                     slot->exp_avg_sq.data_ptr<float>(), grad.data_ptr(), half_kind(grad.scalar_type()),
                     static_cast<float>(grad_scale), out_kind == HalfKind::kNone ? nullptr : out.data_ptr(), out_kind,
                     slot->master.numel(), steps_, h, options_.cpu_threads);
      if (out_kind == HalfKind::kNone) {
        slot->param.copy_(slot->master, /*non_blocking=*/upload);
      } else if (upload) {
        slot->param.copy_(slot->host_param, /*non_blocking=*/true);
      }
      continue;
    }
    const torch::Tensor& raw = slot->param.grad();
    if (!raw.defined()) continue;
    torch::Tensor& weights = slot->master.defined() ? slot->master : slot->param;
    torch::Tensor grad = raw.to(weights.scalar_type());
    if (grad_scale != 1.0) grad = grad * grad_scale;
    adamw_update(weights, slot->exp_avg, slot->exp_avg_sq, grad, h, steps_);
    if (slot->master.defined()) slot->param.copy_(slot->master);
  }
  return true;
}

int64_t MixedAdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& slot : slots_) {
    for (const torch::Tensor* t : {&slot->exp_avg, &slot->exp_avg_sq, &slot->master}) {
      if (t->defined()) bytes += static_cast<int64_t>(t->nbytes());
    }
  }
  return bytes;
}

void MixedAdamW::zero_grad() {
  torch::NoGradGuard no_grad;
  for (const auto& slot : slots_) {
    slot->param.mutable_grad() = torch::Tensor();
    if (slot->host_grad.defined()) slot->host_grad.zero_();
  }
}

std::string MixedAdamW::save() const {
  torch::serialize::OutputArchive archive;
  write_optimizer_kind(archive, planner::OptimizerKind::kAdamW);
  archive.write("steps", torch::tensor(steps_, torch::kLong));
  for (const auto& slot : slots_) {
    archive.write(slot->name + "/exp_avg", slot->exp_avg.cpu());
    archive.write(slot->name + "/exp_avg_sq", slot->exp_avg_sq.cpu());
    if (slot->master.defined()) archive.write(slot->name + "/master", slot->master.cpu());
  }
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void MixedAdamW::load(const std::string& bytes, const std::string& origin) {
  torch::NoGradGuard no_grad;
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  // Checkpoints written before the other optimizers carry no marker.
  check_optimizer_kind(archive, planner::OptimizerKind::kAdamW, origin, /*legacy_ok=*/true);
  auto read = [&](const std::string& key, torch::Tensor& into) { read_state(archive, key, into, origin); };
  torch::Tensor steps = torch::zeros({}, torch::kLong);
  read("steps", steps);
  steps_ = steps.item<int64_t>();
  for (const auto& slot : slots_) {
    read(slot->name + "/exp_avg", slot->exp_avg);
    read(slot->name + "/exp_avg_sq", slot->exp_avg_sq);
    if (slot->master.defined()) read(slot->name + "/master", slot->master);
  }
}

}  // namespace headroom::executor
