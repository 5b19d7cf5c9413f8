#include "executor/cpu_adamw.h"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace headroom::executor {
namespace {

// ---------------------------------------------------------------------------
// The reference: torch.optim.AdamW's update (torch/optim/adam.py,
// _single_tensor_adam with decoupled_weight_decay=True, amsgrad=False,
// maximize=False, torch 2.11) written out in double, element by element. Each
// Mistake is a plausible wrong kernel; the tests show it is caught.
enum class Mistake {
  kNone,
  kNoBiasCorrection,  // step_size = lr, denom = sqrt(v) + eps
  kEpsInsideSqrt,     // denom = sqrt(v / bc2 + eps)
  kCoupledDecay,      // Adam's L2 (grad += wd * param) instead of AdamW's decay
  kDecayAfterUpdate,  // param.mul_ after addcdiv_
  kIgnoreGradScale,   // grads taken unscaled
  kStepOffByOne,      // bias correction with step + 1
};

struct ReferenceState {
  std::vector<double> param, exp_avg, exp_avg_sq;
};

void reference_step(ReferenceState& s, const std::vector<double>& raw_grad, double grad_scale,
                    int64_t step, const AdamWHyper& h, Mistake mistake = Mistake::kNone) {
  const double t = static_cast<double>(mistake == Mistake::kStepOffByOne ? step + 1 : step);
  const double bc1 = mistake == Mistake::kNoBiasCorrection ? 1.0 : 1.0 - std::pow(h.beta1, t);
  const double bc2 = mistake == Mistake::kNoBiasCorrection ? 1.0 : 1.0 - std::pow(h.beta2, t);
  const double step_size = h.lr / bc1;
  for (size_t i = 0; i < s.param.size(); ++i) {
    double g = raw_grad[i] * (mistake == Mistake::kIgnoreGradScale ? 1.0 : grad_scale);
    double& p = s.param[i];
    double& m = s.exp_avg[i];
    double& v = s.exp_avg_sq[i];
    if (mistake == Mistake::kCoupledDecay) {
      g += h.weight_decay * p;
    } else if (mistake != Mistake::kDecayAfterUpdate) {
      p *= 1.0 - h.lr * h.weight_decay;
    }
    m += (1.0 - h.beta1) * (g - m);
    v = h.beta2 * v + (1.0 - h.beta2) * g * g;
    const double denom = mistake == Mistake::kEpsInsideSqrt ? std::sqrt(v / bc2 + h.eps)
                                                            : std::sqrt(v) / std::sqrt(bc2) + h.eps;
    p -= step_size * m / denom;
    if (mistake == Mistake::kDecayAfterUpdate) p *= 1.0 - h.lr * h.weight_decay;
  }
}

// Hyperparameters under which every term is visible in fp32: eps comparable to
// sqrt(v), so eps placement and grad scaling matter; weight decay large enough
// to see whether it is applied before or after the update.
AdamWHyper test_hyper(double weight_decay) {
  return AdamWHyper{
      .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-3, .weight_decay = weight_decay};
}

// Float rounding of the kernel against exact arithmetic: a few ulp of the
// parameter plus a relative 1e-5 of one step's size (lr).
double tolerance(double reference_param, const AdamWHyper& h) {
  return 4e-7 * std::abs(reference_param) + 1e-5 * h.lr;
}

// The largest |kernel - reference| in units of tolerance (<= 1 passes).
double worst_ratio(const std::vector<float>& kernel, const ReferenceState& ref,
                   const AdamWHyper& h) {
  double worst = 0.0;
  for (size_t i = 0; i < kernel.size(); ++i) {
    worst = std::max(worst, std::abs(kernel[i] - ref.param[i]) / tolerance(ref.param[i], h));
  }
  return worst;
}

std::vector<uint16_t> to_kind(const std::vector<float>& values, HalfKind kind) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    out[i] = kind == HalfKind::kBf16 ? float_to_bf16(values[i]) : float_to_fp16(values[i]);
  }
  return out;
}

double from_kind(const void* data, HalfKind kind, size_t i) {
  if (kind == HalfKind::kNone) return static_cast<const float*>(data)[i];
  const uint16_t bits = static_cast<const uint16_t*>(data)[i];
  return kind == HalfKind::kBf16 ? bf16_to_float(bits) : fp16_to_float(bits);
}

// Buffers for a kernel run and the matching reference, from random data.
struct Problem {
  std::vector<float> master, exp_avg, exp_avg_sq;
  ReferenceState reference;
  std::vector<std::vector<float>> grads;  // per step, fp32 before conversion

  Problem(int64_t n, int steps, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> weight(0.0f, 1.0f);
    std::normal_distribution<float> gradient(0.0f, 2e-3f);
    master.resize(static_cast<size_t>(n));
    for (float& w : master) w = weight(rng);
    exp_avg.assign(master.size(), 0.0f);
    exp_avg_sq.assign(master.size(), 0.0f);
    reference.param.assign(master.begin(), master.end());
    reference.exp_avg.assign(master.size(), 0.0);
    reference.exp_avg_sq.assign(master.size(), 0.0);
    for (int s = 0; s < steps; ++s) {
      grads.emplace_back(master.size());
      for (float& g : grads.back()) g = gradient(rng);
    }
  }
};

struct RunOptions {
  HalfKind grad_kind = HalfKind::kNone;
  float grad_scale = 1.0f;
  HalfKind out_kind = HalfKind::kNone;
  int threads = 1;
};

// Runs every step of `problem` through the kernel; returns the last 16-bit output.
std::vector<uint16_t> run_kernel(Problem& problem, const AdamWHyper& h, const RunOptions& o) {
  const auto n = static_cast<int64_t>(problem.master.size());
  std::vector<uint16_t> half_out(problem.master.size(), 0xdead);
  for (size_t s = 0; s < problem.grads.size(); ++s) {
    std::vector<uint16_t> half_grad;
    const void* grad = problem.grads[s].data();
    if (o.grad_kind != HalfKind::kNone) {
      half_grad = to_kind(problem.grads[s], o.grad_kind);
      grad = half_grad.data();
    }
    cpu_adamw_step(problem.master.data(), problem.exp_avg.data(), problem.exp_avg_sq.data(), grad,
                   o.grad_kind, o.grad_scale,
                   o.out_kind == HalfKind::kNone ? nullptr : half_out.data(), o.out_kind, n,
                   static_cast<int64_t>(s) + 1, h, o.threads);
  }
  return half_out;
}

// The reference over the same steps, with the gradients as the kernel sees them
// (after the 16-bit conversion).
ReferenceState run_reference(const Problem& problem, const AdamWHyper& h, const RunOptions& o,
                             Mistake mistake = Mistake::kNone) {
  ReferenceState state = problem.reference;
  for (size_t s = 0; s < problem.grads.size(); ++s) {
    std::vector<double> grad(problem.grads[s].size());
    std::vector<uint16_t> half_grad;
    const void* data = problem.grads[s].data();
    if (o.grad_kind != HalfKind::kNone) {
      half_grad = to_kind(problem.grads[s], o.grad_kind);
      data = half_grad.data();
    }
    for (size_t i = 0; i < grad.size(); ++i) grad[i] = from_kind(data, o.grad_kind, i);
    reference_step(state, grad, o.grad_scale, static_cast<int64_t>(s) + 1, h, mistake);
  }
  return state;
}

TEST_CASE("cpu_adamw_step matches the double-precision reference over several steps") {
  for (double weight_decay : {0.0, 0.1}) {
    for (HalfKind grad_kind : {HalfKind::kNone, HalfKind::kBf16, HalfKind::kFp16}) {
      for (float grad_scale : {1.0f, 1.0f / 3.0f}) {
        CAPTURE(weight_decay);
        CAPTURE(static_cast<int>(grad_kind));
        CAPTURE(grad_scale);
        const AdamWHyper h = test_hyper(weight_decay);
        const RunOptions options{.grad_kind = grad_kind, .grad_scale = grad_scale};
        Problem problem(1000, 6, 7);
        const ReferenceState reference = run_reference(problem, h, options);
        run_kernel(problem, h, options);
        CHECK(worst_ratio(problem.master, reference, h) <= 1.0);
        // exp_avg sums gradients of both signs: its error is relative to the
        // gradients (~2e-3), not to itself.
        for (size_t i = 0; i < problem.master.size(); ++i) {
          const double m = reference.exp_avg[i], v = reference.exp_avg_sq[i];
          REQUIRE(std::abs(problem.exp_avg[i] - m) <= 1e-5 * std::abs(m) + 1e-9);
          REQUIRE(std::abs(problem.exp_avg_sq[i] - v) <= 1e-5 * v + 1e-16);
        }
      }
    }
  }
}

TEST_CASE("the tolerance is tight enough to catch a wrong kernel") {
  // Each mistaken reference is far from the kernel (and the right one is not):
  // a kernel with any of these mistakes would fail the test above.
  for (double weight_decay : {0.0, 0.1}) {
    for (Mistake mistake :
         {Mistake::kNoBiasCorrection, Mistake::kEpsInsideSqrt, Mistake::kCoupledDecay,
          Mistake::kDecayAfterUpdate, Mistake::kIgnoreGradScale, Mistake::kStepOffByOne}) {
      if (weight_decay == 0.0 &&
          (mistake == Mistake::kCoupledDecay || mistake == Mistake::kDecayAfterUpdate)) {
        continue;  // identical without decay
      }
      CAPTURE(weight_decay);
      CAPTURE(static_cast<int>(mistake));
      const AdamWHyper h = test_hyper(weight_decay);
      const RunOptions options{.grad_scale = 0.5f};
      Problem problem(1000, 6, 11);
      const ReferenceState wrong = run_reference(problem, h, options, mistake);
      run_kernel(problem, h, options);
      CHECK(worst_ratio(problem.master, wrong, h) > 10.0);
    }
  }
}

TEST_CASE("cpu_adamw_step reproduces torch.optim.AdamW (torch 2.11, CPU) within 2 ulp") {
  // Known answer, from torch 2.11.0 on CPU (float32):
  //   p = torch.nn.Parameter(torch.tensor([1.0, -0.5, 0.25, 3.0, -2.0, 0.125, 1e-3, -7.5]))
  //   opt = torch.optim.AdamW([p], lr=1e-2, betas=(0.9, 0.999), eps=1e-3, weight_decay=0.1)
  //   for g in grads: p.grad = torch.tensor(g); opt.step()
  // and the bits of p, exp_avg and exp_avg_sq printed as hex.
  std::vector<float> master = {1.0f, -0.5f, 0.25f, 3.0f, -2.0f, 0.125f, 1e-3f, -7.5f};
  const std::vector<std::vector<float>> grads = {
      {0.5f, -0.25f, 1e-3f, 2.0f, -3.0f, 0.0f, 1e-4f, -0.75f},
      {-0.1f, 0.3f, -2e-3f, 1.5f, 0.5f, 1e-2f, -1e-4f, 0.25f},
      {0.05f, -0.05f, 4e-3f, -1.0f, 1.0f, -1e-2f, 2e-4f, 0.5f}};
  const uint32_t torch_param[] = {0x3f7a37aa, 0xbefb0449, 0x3e794c68, 0x403ddbf2,
                                  0xbffd045e, 0x3df2b7e9, 0xb9fb9e83, 0xc0eedc17};
  const uint32_t torch_exp_avg[] = {0x3d158106, 0x3ae5604e, 0x399dcf89, 0x3e49ba5f,
                                    0xbdc8b43b, 0xb8d1b712, 0x37a038f0, 0x3c408311};
  const uint32_t torch_exp_avg_sq[] = {0x39895bbc, 0x39224dce, 0x32b4564e, 0x3bed3b76,
                                       0x3c27a31b, 0x3456a418, 0x2e83e01d, 0x3a65109a};
  std::vector<float> exp_avg(8, 0.0f), exp_avg_sq(8, 0.0f);
  const AdamWHyper h = test_hyper(0.1);
  for (size_t s = 0; s < grads.size(); ++s) {
    cpu_adamw_step(master.data(), exp_avg.data(), exp_avg_sq.data(), grads[s].data(),
                   HalfKind::kNone, 1.0f, nullptr, HalfKind::kNone, 8, static_cast<int64_t>(s) + 1,
                   h, 1);
  }
  // Same-sign floats: the distance of their bit patterns is the distance in ulp.
  auto ulp = [](float a, uint32_t b) {
    return std::abs(static_cast<int64_t>(std::bit_cast<uint32_t>(a)) - static_cast<int64_t>(b));
  };
  for (size_t i = 0; i < 8; ++i) {
    CAPTURE(i);
    CHECK(ulp(master[i], torch_param[i]) <= 2);
    CHECK(ulp(exp_avg[i], torch_exp_avg[i]) <= 2);
    CHECK(ulp(exp_avg_sq[i], torch_exp_avg_sq[i]) <= 2);
  }
}

TEST_CASE("the 16-bit parameter copy is the updated master weights rounded") {
  for (HalfKind out_kind : {HalfKind::kBf16, HalfKind::kFp16}) {
    Problem problem(300, 2, 3);
    const std::vector<uint16_t> out =
        run_kernel(problem, test_hyper(0.1), RunOptions{.out_kind = out_kind});
    for (size_t i = 0; i < out.size(); ++i) {
      const float m = problem.master[i];
      REQUIRE(out[i] == (out_kind == HalfKind::kBf16 ? float_to_bf16(m) : float_to_fp16(m)));
    }
  }
}

TEST_CASE("results are bit-identical for 1, 2, 7 and all threads") {
  // Enough elements that 7 threads each get a chunk, and not a multiple of 64.
  const int64_t n = 7 * (int64_t{1} << 16) + 37;
  for (HalfKind grad_kind : {HalfKind::kNone, HalfKind::kBf16, HalfKind::kFp16}) {
    CAPTURE(static_cast<int>(grad_kind));
    std::vector<float> master, exp_avg, exp_avg_sq;
    std::vector<uint16_t> out;
    for (int threads : {1, 2, 7, 0}) {
      CAPTURE(threads);
      Problem problem(n, 3, 5);
      const RunOptions options{.grad_kind = grad_kind,
                               .grad_scale = 0.25f,
                               .out_kind = HalfKind::kBf16,
                               .threads = threads};
      const std::vector<uint16_t> this_out = run_kernel(problem, test_hyper(0.1), options);
      if (threads == 1) {
        master = problem.master, exp_avg = problem.exp_avg, exp_avg_sq = problem.exp_avg_sq;
        out = this_out;
        continue;
      }
      CHECK(std::memcmp(master.data(), problem.master.data(), master.size() * 4) == 0);
      CHECK(std::memcmp(exp_avg.data(), problem.exp_avg.data(), master.size() * 4) == 0);
      CHECK(std::memcmp(exp_avg_sq.data(), problem.exp_avg_sq.data(), master.size() * 4) == 0);
      CHECK(out == this_out);
    }
  }
}

TEST_CASE("lengths that are not a multiple of the vector width, and n = 0") {
  const AdamWHyper h = test_hyper(0.1);
  for (int64_t n : {1, 3, 63, 64, 65, 130}) {
    CAPTURE(n);
    Problem problem(n, 4, 13);
    const RunOptions options{.grad_kind = HalfKind::kFp16, .grad_scale = 2.0f};
    const ReferenceState reference = run_reference(problem, h, options);
    run_kernel(problem, h, options);
    CHECK(worst_ratio(problem.master, reference, h) <= 1.0);
  }
  SUBCASE("the partial last block computes exactly as a full block does") {
    // The same inputs at element 0 (a full block) and at the last element (the tail).
    const int64_t n = 64 + 5;
    std::vector<float> master(n, 0.75f), exp_avg(n, 1e-3f), exp_avg_sq(n, 2e-6f), grad(n, -3e-3f);
    cpu_adamw_step(master.data(), exp_avg.data(), exp_avg_sq.data(), grad.data(), HalfKind::kNone,
                   1.0f, nullptr, HalfKind::kNone, n, 3, h, 1);
    CHECK(std::bit_cast<uint32_t>(master.front()) == std::bit_cast<uint32_t>(master.back()));
    CHECK(std::bit_cast<uint32_t>(exp_avg.front()) == std::bit_cast<uint32_t>(exp_avg.back()));
    CHECK(std::bit_cast<uint32_t>(exp_avg_sq.front()) ==
          std::bit_cast<uint32_t>(exp_avg_sq.back()));
  }
  SUBCASE("n = 0 touches nothing") {
    cpu_adamw_step(nullptr, nullptr, nullptr, nullptr, HalfKind::kNone, 1.0f, nullptr,
                   HalfKind::kBf16, 0, 1, h, 4);
    CHECK(all_finite(nullptr, HalfKind::kFp16, 0, 4));
  }
}

// ---------------------------------------------------------------------------
// Conversions.

float float_of(uint32_t bits) { return std::bit_cast<float>(bits); }

TEST_CASE("float_to_bf16 rounds to nearest even and keeps NaN") {
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(float_to_bf16(-0.0f) == 0x8000);
  CHECK(float_to_bf16(float_of(0x3f808000)) == 0x3f80);  // tie, 0x3f80 even: down
  CHECK(float_to_bf16(float_of(0x3f818000)) == 0x3f82);  // tie, 0x3f81 odd: up
  CHECK(float_to_bf16(float_of(0x3f808001)) == 0x3f81);  // above the tie: up
  CHECK(float_to_bf16(float_of(0x3f807fff)) == 0x3f80);  // below the tie: down
  CHECK(float_to_bf16(float_of(0x7f7f0000)) == 0x7f7f);  // largest bf16
  CHECK(float_to_bf16(float_of(0x7f7f7fff)) == 0x7f7f);
  CHECK(float_to_bf16(float_of(0x7f7f8000)) == 0x7f80);  // tie at the top rounds to inf
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(float_to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(float_to_bf16(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(float_to_bf16(float_of(0x00010000)) == 0x0001);  // subnormal
  CHECK(float_to_bf16(float_of(0x00008000)) == 0x0000);  // tie to even 0
  CHECK(float_to_bf16(float_of(0x00018000)) == 0x0002);  // tie to even 2
  CHECK(float_to_bf16(float_of(0x00000001)) == 0x0000);
  CHECK(float_to_bf16(std::numeric_limits<float>::quiet_NaN()) == 0x7fc0);
  CHECK(float_to_bf16(float_of(0xffc00000)) == 0xffc0);
  // A signalling NaN whose payload sits in the dropped bits: rounding alone would make it inf.
  CHECK(float_to_bf16(float_of(0x7f800001)) == 0x7fc0);
  CHECK(float_to_bf16(float_of(0xff800001)) == 0xffc0);
}

TEST_CASE("bf16 round trips exactly") {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float f = bf16_to_float(bits);
    CHECK(std::bit_cast<uint32_t>(f) == h << 16);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(bf16_to_float(float_to_bf16(f))));
    } else {
      REQUIRE(float_to_bf16(f) == bits);
    }
  }
}

// fp16 decoded from its fields in double: the definition, written independently.
double fp16_value(uint16_t bits) {
  const int sign = bits >> 15, exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  double magnitude;
  if (exponent == 0x1f) {
    magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN()
                         : std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {
    magnitude = std::ldexp(mantissa, -24);
  } else {
    magnitude = std::ldexp(1024 + mantissa, exponent - 25);
  }
  return sign ? -magnitude : magnitude;
}

TEST_CASE("fp16_to_float decodes all 65536 values") {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    CAPTURE(h);
    const auto bits = static_cast<uint16_t>(h);
    const double expected = fp16_value(bits);
    const float f = fp16_to_float(bits);
    if (std::isnan(expected)) {
      REQUIRE(std::isnan(f));
      REQUIRE(std::signbit(f) == ((h & 0x8000) != 0));
    } else {
      REQUIRE(static_cast<double>(f) == expected);
      REQUIRE(std::signbit(f) == ((h & 0x8000) != 0));  // -0 stays -0
    }
  }
}

TEST_CASE("float_to_fp16 rounds to nearest even, subnormals included") {
  // Every non-NaN fp16 round trips.
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    if (std::isnan(fp16_to_float(bits))) continue;
    REQUIRE(float_to_fp16(fp16_to_float(bits)) == bits);
  }
  // Between each pair of neighbours (subnormal, the subnormal/normal boundary,
  // normal, up to the largest finite): the midpoint goes to the even one, one
  // float ulp either side to the nearer one.
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    CAPTURE(h);
    const float low = fp16_to_float(static_cast<uint16_t>(h));
    const float high = fp16_to_float(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((static_cast<double>(low) + high) / 2);  // exact
    const uint16_t even = (h % 2 == 0) ? static_cast<uint16_t>(h) : static_cast<uint16_t>(h + 1);
    REQUIRE(float_to_fp16(mid) == even);
    REQUIRE(float_to_fp16(std::nextafter(mid, 0.0f)) == h);
    REQUIRE(float_to_fp16(std::nextafter(mid, 1e9f)) == h + 1);
    REQUIRE(float_to_fp16(-mid) == (even | 0x8000));
  }
  CHECK(float_to_fp16(65504.0f) == 0x7bff);                        // largest fp16
  CHECK(float_to_fp16(std::nextafter(65520.0f, 0.0f)) == 0x7bff);  // just below the tie
  CHECK(float_to_fp16(65520.0f) == 0x7c00);                        // tie to even: inf
  CHECK(float_to_fp16(1e30f) == 0x7c00);
  CHECK(float_to_fp16(-1e30f) == 0xfc00);
  CHECK(float_to_fp16(std::numeric_limits<float>::max()) == 0x7c00);
  CHECK(float_to_fp16(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(float_to_fp16(-std::numeric_limits<float>::infinity()) == 0xfc00);
  CHECK(float_to_fp16(0x1p-25f) == 0x0000);  // half the smallest subnormal: even 0
  CHECK(float_to_fp16(std::nextafter(0x1p-25f, 1.0f)) == 0x0001);
  CHECK(float_to_fp16(0x1p-24f * 1.5f) == 0x0002);  // tie between 1 and 2: even 2
  CHECK(float_to_fp16(1e-10f) == 0x0000);
  CHECK(float_to_fp16(-1e-10f) == 0x8000);
  CHECK(float_to_fp16(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(float_to_fp16(0x1p-14f) == 0x0400);                        // smallest normal
  CHECK(float_to_fp16(std::nextafter(0x1p-14f, 0.0f)) == 0x0400);  // rounds up into the normals
  for (uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7fffffffu}) {
    const uint16_t h = float_to_fp16(float_of(nan_bits));
    CHECK((h & 0x7c00) == 0x7c00);
    CHECK((h & 0x03ff) != 0);
    CHECK(((h & 0x8000) != 0) == ((nan_bits & 0x80000000u) != 0));
  }
}

TEST_CASE("all_finite finds inf and NaN anywhere, in every element type") {
  const int64_t n = 3 * (int64_t{1} << 16) + 11;  // several chunks plus a tail
  const float kInf = std::numeric_limits<float>::infinity();
  const float kNan = std::numeric_limits<float>::quiet_NaN();
  for (HalfKind kind : {HalfKind::kNone, HalfKind::kBf16, HalfKind::kFp16}) {
    CAPTURE(static_cast<int>(kind));
    // The largest finite value of each type is finite.
    const float largest = kind == HalfKind::kNone   ? std::numeric_limits<float>::max()
                          : kind == HalfKind::kBf16 ? bf16_to_float(0x7f7f)
                                                    : 65504.0f;
    std::vector<float> values(static_cast<size_t>(n), 1.5f);
    values[7] = -largest;
    values[100] = largest;
    for (int threads : {1, 3, 0}) {
      for (int64_t position : {int64_t{0}, n / 2, (int64_t{1} << 16), n - 1}) {
        for (float bad : {kInf, -kInf, kNan}) {
          CAPTURE(threads);
          CAPTURE(position);
          CAPTURE(bad);
          std::vector<float> with_bad = values;
          with_bad[static_cast<size_t>(position)] = bad;
          std::vector<uint16_t> half = to_kind(with_bad, kind);
          const void* data = kind == HalfKind::kNone ? static_cast<const void*>(with_bad.data())
                                                     : static_cast<const void*>(half.data());
          CHECK_FALSE(all_finite(data, kind, n, threads));
        }
      }
      std::vector<uint16_t> half = to_kind(values, kind);
      const void* data = kind == HalfKind::kNone ? static_cast<const void*>(values.data())
                                                 : static_cast<const void*>(half.data());
      CHECK(all_finite(data, kind, n, threads));
    }
  }
  // fp16 overflows where float does not: a gradient of 1e5 is not finite in fp16.
  const uint16_t big = float_to_fp16(1e5f);
  CHECK_FALSE(all_finite(&big, HalfKind::kFp16, 1, 1));
}

}  // namespace
}  // namespace headroom::executor
