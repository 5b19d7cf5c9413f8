#include "executor/adamw8bit.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace headroom::executor {
namespace bnb {

// Ported op for op (the same fp32 torch ops on the same values) so that the
// map is bit-identical to bitsandbytes': linspace boundaries in fp32, their
// midpoints, scaled by the decade 10^(i - 6) as a Python float times an fp32
// tensor; then 0 and 1, sorted. max_exponent_bits 7 and total_bits 8 leave no
// "additional items" and no gap to fill.
torch::Tensor dynamic_map(bool is_signed) {
  constexpr int kMaxExponentBits = 7;
  constexpr int kNonSignBits = 7;  // total_bits - 1
  std::vector<float> data;
  for (int i = 0; i < kMaxExponentBits; ++i) {
    const int64_t fraction_items =
        is_signed ? (int64_t{1} << (i + kNonSignBits - kMaxExponentBits)) + 1
                  : (int64_t{1} << (i + kNonSignBits - kMaxExponentBits + 1)) + 1;
    const torch::Tensor boundaries = torch::linspace(0.1, 1, fraction_items, torch::kFloat);
    const int64_t n = boundaries.size(0);
    const torch::Tensor means = (boundaries.slice(0, 0, n - 1) + boundaries.slice(0, 1, n)) / 2.0;
    const double decade = std::pow(10.0, static_cast<double>(-(kMaxExponentBits - 1) + i));
    for (double sign : is_signed ? std::vector<double>{1.0, -1.0} : std::vector<double>{1.0}) {
      const torch::Tensor values = (means * (sign * decade)).contiguous();
      data.insert(data.end(), values.data_ptr<float>(), values.data_ptr<float>() + values.numel());
    }
  }
  data.push_back(0.0F);
  data.push_back(1.0F);
  std::sort(data.begin(), data.end());
  return torch::tensor(data, torch::kFloat);
}

// backends/default/ops.py, quantize_blockwise: full blocks are scaled by the
// reciprocal of their absmax, the tail block divided by its own; values are
// clamped to [-1, 1] and take the index of the nearest code (bucketize against
// the midpoints of the sorted map).
std::pair<torch::Tensor, torch::Tensor> quantize_blockwise(const torch::Tensor& x, const torch::Tensor& code,
                                                           int64_t block_size) {
  const torch::Tensor flat = x.reshape(-1).to(torch::kFloat);
  const int64_t n = flat.numel();
  const int64_t rem = n % block_size;
  const int64_t full = n - rem;
  const int64_t blocks = full / block_size;
  const torch::Tensor com = flat.slice(0, 0, full).reshape({blocks, block_size});
  torch::Tensor absmax = std::get<0>(com.abs().max(-1));
  torch::Tensor scaled =
      torch::clamp(com * absmax.clamp_min(1e-38).reciprocal().view({-1, 1}), -1, 1).reshape(-1);
  if (rem > 0) {
    const torch::Tensor tail = flat.slice(0, full, n);
    const torch::Tensor am = tail.abs().max().clamp_min(1e-38);
    absmax = torch::cat({absmax, am.unsqueeze(0)});
    scaled = torch::cat({scaled, torch::clamp(tail / am, -1, 1)});
  }
  const int64_t c = code.size(0);
  const torch::Tensor bounds = (code.slice(0, 0, c - 1) + code.slice(0, 1, c)) / 2;
  const torch::Tensor q = torch::bucketize(scaled, bounds, /*out_int32=*/true).to(torch::kByte);
  return {q.reshape(x.sizes()), absmax};
}

// backends/default/ops.py, _dequantize_blockwise_compute.
torch::Tensor dequantize_blockwise(const torch::Tensor& codes, const torch::Tensor& absmax, const torch::Tensor& code,
                                   int64_t block_size) {
  const torch::Tensor flat = codes.reshape(-1);
  const int64_t n = flat.numel();
  const torch::Tensor values = code.index({flat.to(torch::kLong)});
  const int64_t rem = n % block_size;
  const int64_t full = n - rem;
  const int64_t blocks = full / block_size;
  torch::Tensor out = (values.slice(0, 0, full).reshape({blocks, block_size}) *
                       absmax.slice(0, 0, blocks).view({-1, 1}))
                          .reshape(full);
  if (rem > 0) out = torch::cat({out, values.slice(0, full, n) * absmax[blocks]});
  return out.reshape(codes.sizes());
}

}  // namespace bnb

AdamW8bit::AdamW8bit(NamedParameters parameters, AdamW8bitOptions options)
    : weights_(std::move(parameters), options.master_weights), options_(options) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < weights_.size(); ++i) {
    const torch::Tensor& p = weights_.parameter(i);
    State s;
    if (p.numel() < options_.min_8bit_size) {
      // init_state: dtype float32 for small tensors, whatever the parameter's.
      s.state1 = torch::zeros(p.sizes(), p.options().dtype(torch::kFloat));
      s.state2 = torch::zeros(p.sizes(), p.options().dtype(torch::kFloat));
    } else {
      const int64_t blocks = (p.numel() + bnb::kBlockSize - 1) / bnb::kBlockSize;
      s.state1 = torch::zeros(p.sizes(), p.options().dtype(torch::kByte));
      s.state2 = torch::zeros(p.sizes(), p.options().dtype(torch::kByte));
      s.absmax1 = torch::zeros({blocks}, p.options().dtype(torch::kFloat));
      s.absmax2 = torch::zeros({blocks}, p.options().dtype(torch::kFloat));
      if (!qmap1_.defined()) {
        // Shared by every parameter, as bitsandbytes' name2qmap (two 1 KiB tensors per device).
        qmap1_ = bnb::dynamic_map(true).to(p.device());
        qmap2_ = bnb::dynamic_map(false).to(p.device());
      }
    }
    states_.push_back(std::move(s));
  }
}

bool AdamW8bit::step(double grad_scale, bool check_finite) {
  torch::NoGradGuard no_grad;
  if (check_finite && !weights_.gradients_finite(grad_scale)) return false;
  // bitsandbytes counts steps per parameter (state["step"]); every parameter
  // with a gradient steps together here, so one count serves all of them.
  ++steps_;
  for (size_t i = 0; i < weights_.size(); ++i) {
    const torch::Tensor grad = weights_.gradient(i, grad_scale);
    if (!grad.defined()) continue;
    torch::Tensor& weights = weights_.weights(i);
    if (quantized(i)) {
      update_quantized(states_[i], weights, grad);
    } else {
      update_32bit(states_[i], weights, grad);
    }
    weights_.publish(i);
  }
  return true;
}

// _optimizer_update_8bit_blockwise_cpu, "adam" branch.
void AdamW8bit::update_quantized(State& s, torch::Tensor& weights, const torch::Tensor& grad_in) const {
  const AdamWHyper& h = options_.hyper;
  torch::Tensor m = bnb::dequantize_blockwise(s.state1, s.absmax1, qmap1_);
  torch::Tensor v = bnb::dequantize_blockwise(s.state2, s.absmax2, qmap2_);
  const torch::Tensor grad = grad_in.to(torch::kFloat);
  torch::Tensor p = weights.to(torch::kFloat);  // the weights themselves when fp32
  const double t = static_cast<double>(steps_);
  m.mul_(h.beta1).add_(grad, 1.0 - h.beta1);
  v.mul_(h.beta2).addcmul_(grad, grad, 1.0 - h.beta2);
  const double correction1 = 1.0 - std::pow(h.beta1, t);
  const double correction2 = std::sqrt(1.0 - std::pow(h.beta2, t));
  const torch::Tensor denom = (v.sqrt() / correction2).add_(h.eps);
  if (h.weight_decay > 0.0) p.mul_(1.0 - h.lr * h.weight_decay);
  p.addcdiv_(m, denom, -h.lr / correction1);
  if (!p.is_same(weights)) weights.copy_(p);
  auto [q1, a1] = bnb::quantize_blockwise(m, qmap1_);
  s.state1.copy_(q1);
  s.absmax1.copy_(a1);
  auto [q2, a2] = bnb::quantize_blockwise(v, qmap2_);
  s.state2.copy_(q2);
  s.absmax2.copy_(a2);
}

// _optimizer_update_32bit_cpu, "adam" branch (max_unorm 0: no update scaling).
void AdamW8bit::update_32bit(State& s, torch::Tensor& weights, const torch::Tensor& grad_in) const {
  const AdamWHyper& h = options_.hyper;
  const torch::Tensor grad = grad_in.to(torch::kFloat);
  torch::Tensor p = weights.to(torch::kFloat);
  const double t = static_cast<double>(steps_);
  s.state1.mul_(h.beta1).add_(grad, 1.0 - h.beta1);
  s.state2.mul_(h.beta2).addcmul_(grad, grad, 1.0 - h.beta2);
  const double correction1 = 1.0 - std::pow(h.beta1, t);
  const double correction2 = std::sqrt(1.0 - std::pow(h.beta2, t));
  const double step_size = -h.lr * correction2 / correction1;
  if (h.weight_decay > 0.0) p.mul_(1.0 - h.lr * h.weight_decay);
  const torch::Tensor update = s.state1 / (s.state2.sqrt() + h.eps * correction2);
  p.add_(update, step_size);
  if (!p.is_same(weights)) weights.copy_(p);
}

std::pair<torch::Tensor, torch::Tensor> AdamW8bit::moments(size_t i) const {
  const State& s = states_[i];
  if (!s.absmax1.defined()) return {s.state1.clone(), s.state2.clone()};
  return {bnb::dequantize_blockwise(s.state1, s.absmax1, qmap1_),
          bnb::dequantize_blockwise(s.state2, s.absmax2, qmap2_)};
}

int64_t AdamW8bit::state_bytes() const {
  int64_t bytes = weights_.master_bytes();
  for (const State& s : states_) {
    for (const torch::Tensor* t : {&s.state1, &s.state2, &s.absmax1, &s.absmax2}) {
      if (t->defined()) bytes += static_cast<int64_t>(t->nbytes());
    }
  }
  return bytes;
}

std::string AdamW8bit::save() const {
  torch::serialize::OutputArchive archive;
  write_optimizer_kind(archive, planner::OptimizerKind::kAdamW8bit);
  archive.write("steps", torch::tensor(steps_, torch::kLong));
  for (size_t i = 0; i < weights_.size(); ++i) {
    const State& s = states_[i];
    const std::string& name = weights_.name(i);
    archive.write(name + "/state1", s.state1.cpu());
    archive.write(name + "/state2", s.state2.cpu());
    if (s.absmax1.defined()) {
      archive.write(name + "/absmax1", s.absmax1.cpu());
      archive.write(name + "/absmax2", s.absmax2.cpu());
    }
  }
  weights_.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void AdamW8bit::load(const std::string& bytes, const std::string& origin) {
  torch::NoGradGuard no_grad;
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  check_optimizer_kind(archive, planner::OptimizerKind::kAdamW8bit, origin);
  torch::Tensor steps = torch::zeros({}, torch::kLong);
  read_state(archive, "steps", steps, origin);
  steps_ = steps.item<int64_t>();
  for (size_t i = 0; i < weights_.size(); ++i) {
    State& s = states_[i];
    const std::string& name = weights_.name(i);
    read_state(archive, name + "/state1", s.state1, origin);
    read_state(archive, name + "/state2", s.state2, origin);
    if (s.absmax1.defined()) {
      read_state(archive, name + "/absmax1", s.absmax1, origin);
      read_state(archive, name + "/absmax2", s.absmax2, origin);
    }
  }
  weights_.load(archive, origin);
}

}  // namespace headroom::executor
