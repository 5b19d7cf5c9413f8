#include "executor/optimizer.h"

#include <sstream>
#include <stdexcept>

#include "executor/adafactor.h"
#include "executor/adamw8bit.h"
#include "executor/mixed_adamw.h"
#include "executor/sgd.h"
#include "executor/status_error.h"
#include "executor/zero_adamw.h"

namespace headroom::executor {

std::unique_ptr<Optimizer> make_optimizer(NamedParameters parameters, const OptimizerOptions& options) {
  using planner::OptimizerKind;
  if (options.offload_to_cpu && options.kind != OptimizerKind::kAdamW) {
    throw std::invalid_argument(std::string(planner::optimizer_name(options.kind)) +
                                ": only AdamW is offloaded to the CPU by the executor");
  }
  const bool partitioned = options.communicator != nullptr &&
                           (options.zero_stage == 3 || (options.communicator->world_size() > 1 && options.zero_stage >= 1));
  if (partitioned && options.kind != OptimizerKind::kAdamW) {
    throw std::invalid_argument(std::string(planner::optimizer_name(options.kind)) +
                                ": only AdamW is partitioned over ranks by the executor");
  }
  switch (options.kind) {
    case OptimizerKind::kAdamW: {
      MixedAdamWOptions adam;
      adam.hyper.lr = options.learning_rate;
      adam.hyper.weight_decay = options.weight_decay;
      adam.master_weights = options.master_weights;
      adam.offload_to_cpu = options.offload_to_cpu;
      adam.cpu_threads = options.cpu_threads;
      if (partitioned) {
        ZeroAdamWOptions zero;
        zero.adam = adam;
        zero.stage = options.zero_stage;
        zero.bucket_elements = options.reduce_bucket_elements;
        zero.partitioned = options.partitioned;
        return std::make_unique<ZeroAdamW>(std::move(parameters), *options.communicator, zero);
      }
      return std::make_unique<MixedAdamW>(std::move(parameters), adam);
    }
    case OptimizerKind::kSgdMomentum: {
      SgdOptions sgd;
      sgd.lr = options.learning_rate;
      sgd.weight_decay = options.weight_decay;
      sgd.master_weights = options.master_weights;
      return std::make_unique<SgdMomentum>(std::move(parameters), sgd);
    }
    case OptimizerKind::kAdafactor: {
      AdafactorOptions adafactor;
      adafactor.lr = options.learning_rate;
      adafactor.weight_decay = options.weight_decay;
      adafactor.master_weights = options.master_weights;
      return std::make_unique<Adafactor>(std::move(parameters), adafactor);
    }
    case OptimizerKind::kAdamW8bit: {
      AdamW8bitOptions adam;
      adam.hyper.lr = options.learning_rate;
      adam.hyper.weight_decay = options.weight_decay;
      adam.master_weights = options.master_weights;
      return std::make_unique<AdamW8bit>(std::move(parameters), adam);
    }
    case OptimizerKind::kAdamW4bit:
    case OptimizerKind::kAdamW8bitTorchao:
    case OptimizerKind::kSgd:
      break;
  }
  throw std::invalid_argument(std::string(planner::optimizer_name(options.kind)) +
                              " is not implemented in the executor");
}

UpdatedWeights::UpdatedWeights(NamedParameters parameters, bool master_weights) {
  torch::NoGradGuard no_grad;
  entries_.reserve(parameters.size());
  for (auto& [name, param] : parameters) {
    Entry entry{name, param, torch::Tensor()};
    if (master_weights && param.scalar_type() != torch::kFloat) {
      entry.master = param.detach().to(torch::kFloat).clone();
    }
    entries_.push_back(std::move(entry));
  }
}

torch::Tensor& UpdatedWeights::weights(size_t i) {
  Entry& e = entries_[i];
  return e.master.defined() ? e.master : e.param;
}

torch::Tensor UpdatedWeights::gradient(size_t i, double grad_scale) const {
  const Entry& e = entries_[i];
  const torch::Tensor& raw = e.param.grad();
  if (!raw.defined()) return raw;
  const torch::ScalarType type = e.master.defined() ? torch::kFloat : e.param.scalar_type();
  // The parameter's .grad itself when neither dtype nor scale change it: the
  // updates read it and never write it.
  torch::Tensor grad = raw.to(type);
  if (grad_scale != 1.0) grad = grad * grad_scale;
  return grad;
}

void UpdatedWeights::publish(size_t i) {
  Entry& e = entries_[i];
  if (e.master.defined()) e.param.detach().copy_(e.master);
}

bool UpdatedWeights::gradients_finite(double grad_scale) const {
  std::vector<torch::Tensor> maxima;
  for (const Entry& e : entries_) {
    const torch::Tensor& g = e.param.grad();
    if (g.defined()) maxima.push_back(g.abs().amax().to(torch::kFloat).cpu().reshape({1}));
  }
  if (maxima.empty()) return true;
  return torch::isfinite(torch::cat(maxima) * grad_scale).all().item<bool>();
}

void UpdatedWeights::zero_grad() {
  for (Entry& e : entries_) e.param.mutable_grad() = torch::Tensor();
}

int64_t UpdatedWeights::master_bytes() const {
  int64_t bytes = 0;
  for (const Entry& e : entries_) {
    if (e.master.defined()) bytes += static_cast<int64_t>(e.master.nbytes());
  }
  return bytes;
}

void UpdatedWeights::save(torch::serialize::OutputArchive& archive) const {
  for (const Entry& e : entries_) {
    if (e.master.defined()) archive.write(e.name + "/master", e.master.cpu());
  }
}

void UpdatedWeights::load(torch::serialize::InputArchive& archive, const std::string& origin) {
  for (Entry& e : entries_) {
    if (e.master.defined()) read_state(archive, e.name + "/master", e.master, origin);
  }
}

namespace {

constexpr planner::OptimizerKind kKinds[] = {planner::OptimizerKind::kAdamW, planner::OptimizerKind::kAdamW8bit,
                                             planner::OptimizerKind::kAdamW4bit,
                                             planner::OptimizerKind::kSgdMomentum,
                                             planner::OptimizerKind::kAdafactor,
                                             planner::OptimizerKind::kSgd,
                                             planner::OptimizerKind::kAdamW8bitTorchao};

std::string kind_key(planner::OptimizerKind kind) {
  return "optimizer/" + std::string(planner::optimizer_name(kind));
}

}  // namespace

void write_optimizer_kind(torch::serialize::OutputArchive& archive, planner::OptimizerKind kind) {
  archive.write(kind_key(kind), torch::ones({1}, torch::kByte));
}

void check_optimizer_kind(torch::serialize::InputArchive& archive, planner::OptimizerKind kind,
                          const std::string& origin, bool legacy_ok) {
  torch::Tensor marker;
  if (archive.try_read(kind_key(kind), marker)) return;
  for (planner::OptimizerKind other : kKinds) {
    if (other != kind && archive.try_read(kind_key(other), marker)) {
      throw StatusError(Status::invalid_input(
          origin + ": the optimizer state is " + std::string(planner::optimizer_name(other)) +
          "'s, but this run steps " + std::string(planner::optimizer_name(kind)) +
          "; resume with the plan that wrote it"));
    }
  }
  if (!legacy_ok) {
    throw StatusError(Status::invalid_input(origin +
                                            ": the optimizer state names no optimizer; expected " +
                                            std::string(planner::optimizer_name(kind)) + "'s"));
  }
}

std::pair<std::string, torch::Tensor> optimizer_kind_marker(planner::OptimizerKind kind) {
  return {kind_key(kind), torch::ones({1}, torch::kByte)};
}

void check_optimizer_kind_marker(const std::map<std::string, torch::Tensor>& header, planner::OptimizerKind kind,
                                 const std::string& origin) {
  if (header.count(kind_key(kind))) return;
  for (planner::OptimizerKind other : kKinds) {
    if (other != kind && header.count(kind_key(other))) {
      throw StatusError(Status::invalid_input(
          origin + ": the optimizer state is " + std::string(planner::optimizer_name(other)) +
          "'s, but this run steps " + std::string(planner::optimizer_name(kind)) +
          "; resume with the plan that wrote it"));
    }
  }
  throw StatusError(Status::invalid_input(origin +
                                          ": the optimizer state names no optimizer; expected " +
                                          std::string(planner::optimizer_name(kind)) + "'s"));
}

void read_state(torch::serialize::InputArchive& archive, const std::string& key, torch::Tensor& into,
                const std::string& origin) {
  torch::Tensor value;
  if (!archive.try_read(key, value))
    throw StatusError(Status::invalid_input(origin + ": optimizer state lacks \"" + key + "\""));
  if (value.sizes() != into.sizes() || value.scalar_type() != into.scalar_type()) {
    throw StatusError(Status::invalid_input(origin + ": optimizer state \"" + key +
                                            "\" has another shape or dtype than this run's"));
  }
  into.copy_(value);
}

std::string save_optimizer_state(planner::OptimizerKind kind, int64_t steps, const StateTensors& shared,
                                 const std::vector<StateTensors>& per_parameter, const UpdatedWeights& weights) {
  torch::serialize::OutputArchive archive;
  write_optimizer_kind(archive, kind);
  archive.write("steps", torch::tensor(steps, torch::kLong));
  for (const auto& [key, tensor] : shared) archive.write(key, tensor.cpu());
  for (size_t i = 0; i < per_parameter.size(); ++i) {
    for (const auto& [key, tensor] : per_parameter[i]) archive.write(weights.name(i) + "/" + key, tensor.cpu());
  }
  weights.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

int64_t load_optimizer_state(const std::string& bytes, const std::string& origin, planner::OptimizerKind kind,
                             const StateTensors& shared, const std::vector<StateTensors>& per_parameter,
                             UpdatedWeights& weights) {
  torch::NoGradGuard no_grad;
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  check_optimizer_kind(archive, kind, origin);
  torch::Tensor steps = torch::zeros({}, torch::kLong);
  read_state(archive, "steps", steps, origin);
  for (auto [key, tensor] : shared) read_state(archive, key, tensor, origin);
  for (size_t i = 0; i < per_parameter.size(); ++i) {
    for (auto [key, tensor] : per_parameter[i]) read_state(archive, weights.name(i) + "/" + key, tensor, origin);
  }
  weights.load(archive, origin);
  return steps.item<int64_t>();
}

}  // namespace headroom::executor
