// Adafactor (executor/adafactor.h) against torch.optim.Adafactor's published
// algorithm (torch 2.11, torch/optim/_adafactor.py: the docstring's algorithm
// and _single_tensor_adafactor), ported below with plain loops in float64;
// its state layout and bytes against the planner's; checkpoints; tiny-llama
// trains with it.
#include <algorithm>
#include <cmath>

#include "executor/adafactor.h"
#include "optimizer_test_support.h"

namespace headroom::executor {
namespace {

using namespace optimizer_test;

constexpr double kLr = 1e-2;        // torch's default
constexpr double kDecay = 0.01;
constexpr double kEps1 = 1.1920928955078125e-07;  // torch.finfo(torch.float32).eps
constexpr double kEps2 = 1e-3;
constexpr double kBeta2Decay = -0.8;

// One parameter as the reference holds it: a tensor of 2+ dimensions viewed as
// batch x rows x cols with row and column factors, a vector with a full variance.
struct Reference {
  std::vector<int64_t> shape;
  std::vector<double> p;
  std::vector<double> row;  // batch * rows
  std::vector<double> col;  // batch * cols
  std::vector<double> var;  // vectors
  int64_t batch = 1;
  int64_t rows = 1;
  int64_t cols = 1;

  explicit Reference(const torch::Tensor& param) : shape(param.sizes().begin(), param.sizes().end()) {
    const torch::Tensor flat = param.detach().to(torch::kDouble).contiguous().reshape(-1);
    p.assign(flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
    if (shape.size() >= 2) {
      cols = shape.back();
      rows = shape[shape.size() - 2];
      batch = static_cast<int64_t>(p.size()) / (rows * cols);
      row.assign(static_cast<size_t>(batch * rows), 0.0);
      col.assign(static_cast<size_t>(batch * cols), 0.0);
    } else {
      var.assign(p.size(), 0.0);
    }
  }

  // Step t with gradient g (row-major, as p).
  void step(const std::vector<double>& g, double t) {
    const double n = static_cast<double>(p.size());
    const double beta2_hat = 1 - std::pow(t, kBeta2Decay);  // the algorithm's beta2_t
    const double rho = std::min(kLr, 1 / std::sqrt(t));
    double sum_sq = 0;
    for (double x : p) sum_sq += x * x;
    const double alpha = std::max(kEps2, std::sqrt(sum_sq / n)) * rho;
    for (double& x : p) x -= kLr * kDecay * x;
    std::vector<double> v(p.size());
    if (var.empty()) {
      for (int64_t b = 0; b < batch; ++b) {
        double row_sum = 0;
        for (int64_t r = 0; r < rows; ++r) {
          double mean = 0;
          for (int64_t c = 0; c < cols; ++c) mean += sq(g[idx(b, r, c)]) / static_cast<double>(cols);
          double& R = row[static_cast<size_t>(b * rows + r)];
          R = beta2_hat * R + (1 - beta2_hat) * mean;
          row_sum += R;
        }
        for (int64_t c = 0; c < cols; ++c) {
          double mean = 0;
          for (int64_t r = 0; r < rows; ++r) mean += sq(g[idx(b, r, c)]) / static_cast<double>(rows);
          double& C = col[static_cast<size_t>(b * cols + c)];
          C = beta2_hat * C + (1 - beta2_hat) * mean;
        }
        // V = R C / max(mean of R, eps1): torch's mean-based form of R C / (1^T R).
        const double norm = std::max(row_sum / static_cast<double>(rows), kEps1);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols; ++c) {
            v[idx(b, r, c)] = row[static_cast<size_t>(b * rows + r)] * col[static_cast<size_t>(b * cols + c)] / norm;
          }
        }
      }
    } else {
      for (size_t i = 0; i < p.size(); ++i) {
        var[i] = beta2_hat * var[i] + (1 - beta2_hat) * g[i] * g[i];
        v[i] = var[i];
      }
    }
    std::vector<double> u(p.size());
    double u_sq = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      u[i] = g[i] / std::max(std::sqrt(v[i]), kEps1);
      u_sq += u[i] * u[i];
    }
    const double clip = std::max(1.0, std::sqrt(u_sq / n) / 1.0);  // d = 1
    for (size_t i = 0; i < p.size(); ++i) p[i] -= alpha * u[i] / clip;
  }

 private:
  static double sq(double x) { return x * x; }
  size_t idx(int64_t b, int64_t r, int64_t c) const { return static_cast<size_t>((b * rows + r) * cols + c); }
};

std::vector<double> as_doubles(const torch::Tensor& t) {
  const torch::Tensor flat = t.detach().to(torch::kDouble).contiguous().reshape(-1);
  return {flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel()};
}

AdafactorOptions options(bool master) {
  AdafactorOptions o;
  o.lr = kLr;
  o.weight_decay = kDecay;
  o.master_weights = master;
  return o;
}

}  // namespace

TEST_CASE("Adafactor follows torch's algorithm, ported in float64, for matrices, a 3-D tensor and a vector") {
  const NamedParameters ours = make_parameters({{6, 5}, {40, 3}, {3, 4, 2}, {5}}, torch::kFloat, 11);
  std::vector<Reference> reference;
  for (const auto& [name, p] : ours) reference.emplace_back(p);
  Adafactor adafactor(ours, options(false));
  for (int step = 1; step <= 6; ++step) {
    set_gradients(ours, step, 12);
    if (step == 3) ours[0].second.mutable_grad() *= 1e-3;  // small gradients: the RMS clip stays off
    for (size_t i = 0; i < ours.size(); ++i) reference[i].step(as_doubles(ours[i].second.grad()), step);
    CHECK(adafactor.step(1.0, false));
    for (size_t i = 0; i < ours.size(); ++i) {
      const std::vector<double> got = as_doubles(ours[i].second);
      double worst = 0;
      for (size_t k = 0; k < got.size(); ++k) worst = std::max(worst, std::abs(got[k] - reference[i].p[k]));
      INFO("step " << step << " parameter " << i << ": largest difference " << worst);
      // fp32 against float64: each step moves a weight by about lr * RMS(p) = 1e-2;
      // fp32 rounding over 6 steps stays under 5e-7 (measured).
      CHECK(worst < 2e-6);
    }
  }
}

TEST_CASE("Adafactor keeps a row and a column factor per matrix, fp32 states, and the planner counts them") {
  const std::vector<std::vector<int64_t>> shapes{{64, 64}, {176, 64}, {256, 64}, {64}, {2, 3, 4}};
  struct Case {
    planner::Precision precision;
    torch::ScalarType dtype;
  };
  for (const Case& c : {Case{planner::Precision::kFp32, torch::kFloat},
                        Case{planner::Precision::kBf16Mixed, torch::kBFloat16},
                        Case{planner::Precision::kBf16Pure, torch::kBFloat16}}) {
    INFO(planner::precision_name(c.precision));
    const NamedParameters params = make_parameters(shapes, c.dtype, 13);
    Adafactor adafactor(params, options(planner::master_bytes_per_element(c.precision) > 0));
    CHECK(adafactor.state_bytes() == planner_bytes(planner::OptimizerKind::kAdafactor, c.precision, params));
  }
  // The 3-D tensor: rows 2 x 3, columns 2 x 4 (torch: row_shape[-1] = 1, col_shape[-2] = 1).
  CHECK(planner::optimizer_state_bytes(planner::OptimizerKind::kAdafactor, planner::Precision::kFp32, {2, 3, 4}) ==
        (2 * 3 + 2 * 4) * 4);
  const NamedParameters cube = make_parameters({{2, 3, 4}}, torch::kFloat, 14);
  Adafactor adafactor(cube, options(false));
  torch::serialize::InputArchive saved;
  const std::string bytes = adafactor.save();
  saved.load_from(bytes.data(), bytes.size());
  torch::Tensor row;
  torch::Tensor col;
  saved.read("p0/row_var", row);
  saved.read("p0/col_var", col);
  CHECK(row.sizes() == torch::IntArrayRef({2, 3, 1}));
  CHECK(col.sizes() == torch::IntArrayRef({2, 1, 4}));
  CHECK((row.scalar_type() == torch::kFloat));
}

TEST_CASE("Adafactor saves and loads its state: steps after a load match steps without one") {
  const NamedParameters a = make_parameters({{5, 7}, {7}}, torch::kBFloat16, 15);
  const NamedParameters b = clone_parameters(a);
  Adafactor first(a, options(true));
  for (int step = 1; step <= 3; ++step) {
    set_gradients(a, step, 16);
    first.step(1.0, false);
  }
  for (size_t i = 0; i < a.size(); ++i) b[i].second.detach().copy_(a[i].second);
  Adafactor second(b, options(true));
  second.load(first.save(), "test");
  CHECK(second.steps_taken() == 3);
  for (int step = 4; step <= 6; ++step) {  // rho_t and beta2_t depend on the step count
    set_gradients(a, step, 16);
    set_gradients(b, step, 16);
    first.step(1.0, false);
    second.step(1.0, false);
  }
  for (size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i].second, b[i].second));
  check_same_tensors(first.save(), second.save(), "optimizer state");
}

TEST_CASE("tiny-llama trains with Adafactor in bf16 mixed precision: the loss falls, bytes as predicted, exact resume") {
  const planner::Plan plan = tiny_llama_plan(planner::OptimizerKind::kAdafactor, planner::Precision::kBf16Mixed);
  Recorder steps;
  const RunResult r = run_and_resume(plan, 3e-2, 12, "adafactor", steps);
  CHECK(steps.steps.back().loss < steps.steps.front().loss - 0.3);
  const CategoryCheck* optimizer = find_category(r, "optimizer states + master weights");
  REQUIRE(optimizer != nullptr);
  INFO("predicted " << optimizer->predicted << " measured " << optimizer->measured);
  CHECK(std::abs(optimizer->relative_error()) <= 0.05);
}

}  // namespace headroom::executor
