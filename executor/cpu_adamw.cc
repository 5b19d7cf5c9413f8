#include "executor/cpu_adamw.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace headroom::executor {
namespace {

// Elements per inner loop: a fixed trip count over __restrict pointers, so GCC
// vectorises the loop even under -O2's "very cheap" cost model (no epilogue, no
// alias check). The last partial block runs through the same function on a
// zero-padded copy, so every element sees the same instructions whichever
// thread or position it has: results do not depend on the chunking.
constexpr int64_t kBlock = 64;

// Fewer elements than this per thread cost more in thread start-up (~20 us)
// than they save; a 64 Ki-element chunk takes ~50 us on one core.
constexpr int64_t kMinElementsPerThread = int64_t{1} << 16;

// The step's scalars, computed in double as torch does in Python and rounded to
// float where torch hands them to a float tensor op.
struct StepConstants {
  float grad_scale;
  float decay;                  // 1 - lr * weight_decay                  (param.mul_)
  float one_minus_beta1;        // lerp weight                             (exp_avg.lerp_)
  float beta2;                  //                                         (exp_avg_sq.mul_)
  float one_minus_beta2;        // addcmul value                           (exp_avg_sq.addcmul_)
  float bias_correction2_sqrt;  // sqrt(1 - beta2**step)             (exp_avg_sq.sqrt() / ...)
  float eps;                    //                                         (.add_(eps))
  float neg_step_size;          // -lr / (1 - beta1**step)                 (param.addcdiv_ value)
};

StepConstants step_constants(const AdamWHyper& h, int64_t step, float grad_scale) {
  const double bias_correction1 = 1.0 - std::pow(h.beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(h.beta2, static_cast<double>(step));
  return StepConstants{
      .grad_scale = grad_scale,
      .decay = static_cast<float>(1.0 - h.lr * h.weight_decay),
      .one_minus_beta1 = static_cast<float>(1.0 - h.beta1),
      .beta2 = static_cast<float>(h.beta2),
      .one_minus_beta2 = static_cast<float>(1.0 - h.beta2),
      .bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2)),
      .eps = static_cast<float>(h.eps),
      .neg_step_size = static_cast<float>(-(h.lr / bias_correction1)),
  };
}

template <HalfKind kKind>
using Storage = std::conditional_t<kKind == HalfKind::kNone, float, uint16_t>;

template <HalfKind kKind>
inline float to_float(Storage<kKind> x) {
  if constexpr (kKind == HalfKind::kBf16) return bf16_to_float(x);
  if constexpr (kKind == HalfKind::kFp16) return fp16_to_float(x);
  if constexpr (kKind == HalfKind::kNone) return x;
}

template <HalfKind kKind>
inline uint16_t to_half(float x) {
  if constexpr (kKind == HalfKind::kBf16) return float_to_bf16(x);
  return float_to_fp16(x);
}

// IEEE square roots of a block. A loop calling sqrtf does not vectorise: GCC keeps
// its errno path (the build has no -fno-math-errno). Eigen's packet sqrt is not
// an option either: under EIGEN_FAST_MATH (its default) it is an rsqrt estimate
// plus one Newton step, off by 1-2 bits and wrong for inf and subnormals. SSE2
// intrinsics, also in the AVX2 clone (4 wide there too: 8-wide square roots would
// take a second copy of the kernel; measured ~15% on one core, docs/cpu-adamw.md).
[[gnu::always_inline]] inline void sqrt_block(const float* __restrict in, float* __restrict out) {
#if defined(__SSE2__)
  static_assert(kBlock % 4 == 0);
  for (int64_t i = 0; i < kBlock; i += 4) _mm_storeu_ps(out + i, _mm_sqrt_ps(_mm_loadu_ps(in + i)));
#else
  for (int64_t i = 0; i < kBlock; ++i) out[i] = std::sqrt(in[i]);
#endif
}

// One block of kBlock elements, torch's _single_tensor_adam order (decoupled
// weight decay), each line one torch op on a float tensor:
//   param.mul_(1 - lr*wd); exp_avg.lerp_(grad, 1-beta1);
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2);
//   denom = (exp_avg_sq.sqrt() / sqrt(bias_correction2)).add_(eps);
//   param.addcdiv_(exp_avg, denom, value=-step_size)
// lerp with weight < 0.5 is start + weight * (end - start) (ATen's Lerp.h);
// addcmul is self + value * t1 * t2 and addcdiv self + value * t1 / t2, left to
// right (ATen's PointwiseOpsKernel.cpp). Both loops vectorise at -O2 and -O3
// (checked with -fopt-info-vec; docs/cpu-adamw.md).
template <HalfKind kGrad, HalfKind kOut>
[[gnu::always_inline]] inline void step_block(float* __restrict master, float* __restrict exp_avg,
                                              float* __restrict exp_avg_sq,
                                              const Storage<kGrad>* __restrict grad,
                                              uint16_t* __restrict half_out,
                                              const StepConstants& c) {
  for (int64_t i = 0; i < kBlock; ++i) {
    const float g = to_float<kGrad>(grad[i]) * c.grad_scale;
    master[i] = master[i] * c.decay;
    exp_avg[i] = exp_avg[i] + c.one_minus_beta1 * (g - exp_avg[i]);
    exp_avg_sq[i] = exp_avg_sq[i] * c.beta2 + c.one_minus_beta2 * g * g;
  }
  float root[kBlock];
  sqrt_block(exp_avg_sq, root);
  for (int64_t i = 0; i < kBlock; ++i) {
    const float denom = root[i] / c.bias_correction2_sqrt + c.eps;
    master[i] = master[i] + c.neg_step_size * exp_avg[i] / denom;
    if constexpr (kOut != HalfKind::kNone) half_out[i] = to_half<kOut>(master[i]);
  }
}

// Elements [begin, end) of the whole buffers. begin is a multiple of kBlock.
template <HalfKind kGrad, HalfKind kOut>
[[gnu::always_inline]] inline void step_range(float* master, float* exp_avg, float* exp_avg_sq,
                                              const Storage<kGrad>* grad, uint16_t* half_out,
                                              int64_t begin, int64_t end, const StepConstants& c) {
  int64_t i = begin;
  for (; i + kBlock <= end; i += kBlock) {
    step_block<kGrad, kOut>(master + i, exp_avg + i, exp_avg_sq + i, grad + i,
                            kOut == HalfKind::kNone ? nullptr : half_out + i, c);
  }
  const int64_t rest = end - i;
  if (rest == 0) return;
  // The partial block: same instructions on a zero-padded copy (zeros stay finite).
  float tail_master[kBlock] = {}, tail_avg[kBlock] = {}, tail_avg_sq[kBlock] = {};
  Storage<kGrad> tail_grad[kBlock] = {};
  uint16_t tail_out[kBlock] = {};
  std::copy_n(master + i, rest, tail_master);
  std::copy_n(exp_avg + i, rest, tail_avg);
  std::copy_n(exp_avg_sq + i, rest, tail_avg_sq);
  std::copy_n(grad + i, rest, tail_grad);
  step_block<kGrad, kOut>(tail_master, tail_avg, tail_avg_sq, tail_grad, tail_out, c);
  std::copy_n(tail_master, rest, master + i);
  std::copy_n(tail_avg, rest, exp_avg + i);
  std::copy_n(tail_avg_sq, rest, exp_avg_sq + i);
  if constexpr (kOut != HalfKind::kNone) std::copy_n(tail_out, rest, half_out + i);
}

// Runs body(begin, end) over [0, n) on up to `threads` threads, in chunks whose
// starts are multiples of kBlock (whole cache lines for fp32 and 16-bit data).
template <typename Body>
void parallel_chunks(int64_t n, int threads, const Body& body) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t by_size = std::max<int64_t>(1, n / kMinElementsPerThread);
  const int64_t workers = std::min<int64_t>(threads, by_size);
  if (workers <= 1) {
    body(int64_t{0}, n);
    return;
  }
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const int64_t blocks_per_worker = (blocks + workers - 1) / workers;
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(workers - 1));
  for (int64_t w = 1; w < workers; ++w) {
    const int64_t begin = std::min(n, w * blocks_per_worker * kBlock);
    const int64_t end = std::min(n, (w + 1) * blocks_per_worker * kBlock);
    if (begin < end) pool.emplace_back([&body, begin, end] { body(begin, end); });
  }
  body(int64_t{0}, std::min(n, blocks_per_worker * kBlock));
  for (std::thread& t : pool) t.join();
}

// One thread's share of a step: the buffers, the kinds and [begin, end).
struct StepChunk {
  float* master;
  float* exp_avg;
  float* exp_avg_sq;
  const void* grad;
  HalfKind grad_kind;
  void* half_out;
  HalfKind out_kind;
  int64_t begin;
  int64_t end;
};

template <HalfKind kGrad>
[[gnu::always_inline]] inline void step_chunk_for_grad(const StepChunk& a, const StepConstants& c) {
  const auto* grad = static_cast<const Storage<kGrad>*>(a.grad);
  auto* out = static_cast<uint16_t*>(a.half_out);
  switch (a.out_kind) {
    case HalfKind::kNone:
      return step_range<kGrad, HalfKind::kNone>(a.master, a.exp_avg, a.exp_avg_sq, grad, out,
                                                a.begin, a.end, c);
    case HalfKind::kBf16:
      return step_range<kGrad, HalfKind::kBf16>(a.master, a.exp_avg, a.exp_avg_sq, grad, out,
                                                a.begin, a.end, c);
    case HalfKind::kFp16:
      return step_range<kGrad, HalfKind::kFp16>(a.master, a.exp_avg, a.exp_avg_sq, grad, out,
                                                a.begin, a.end, c);
  }
}

// The whole kernel is compiled twice on x86-64, for the baseline (SSE2) and for
// AVX2, and the loader picks one per machine (GCC/Clang function multiversioning).
// AVX2 measured 1.6x faster on one core (AMD EPYC, docs/cpu-adamw.md). Both clones
// compute identical bits: AVX2 does not imply FMA, so nothing is contracted, and
// add, mul, div and sqrt are correctly rounded in every width.
#if defined(__x86_64__) && defined(__GNUC__)
#define HEADROOM_ADAMW_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define HEADROOM_ADAMW_CLONES
#endif

HEADROOM_ADAMW_CLONES void step_chunk(const StepChunk& a, const StepConstants& c) {
  switch (a.grad_kind) {
    case HalfKind::kNone:
      return step_chunk_for_grad<HalfKind::kNone>(a, c);
    case HalfKind::kBf16:
      return step_chunk_for_grad<HalfKind::kBf16>(a, c);
    case HalfKind::kFp16:
      return step_chunk_for_grad<HalfKind::kFp16>(a, c);
  }
}

// Ors together "exponent all ones" over a range; a fixed-size inner loop so it
// vectorises, and no early exit (a finite buffer, the common case, is read whole anyway).
template <HalfKind kKind>
bool range_finite(const Storage<kKind>* data, int64_t begin, int64_t end) {
  using Bits = std::conditional_t<kKind == HalfKind::kNone, uint32_t, uint16_t>;
  constexpr Bits kExponent = static_cast<Bits>(kKind == HalfKind::kNone   ? 0x7f800000u
                                               : kKind == HalfKind::kBf16 ? 0x7f80u
                                                                          : 0x7c00u);
  auto is_special = [](Storage<kKind> x) {
    return static_cast<Bits>((std::bit_cast<Bits>(x) & kExponent) == kExponent);
  };
  Bits bad = 0;
  int64_t i = begin;
  for (; i + kBlock <= end; i += kBlock) {
    for (int64_t j = 0; j < kBlock; ++j) bad |= is_special(data[i + j]);
  }
  for (; i < end; ++i) bad |= is_special(data[i]);
  return bad == 0;
}

template <HalfKind kKind>
bool all_finite_typed(const void* data, int64_t n, int threads) {
  const auto* typed = static_cast<const Storage<kKind>*>(data);
  // One flag per chunk start; written by one thread each, read after the joins.
  std::vector<char> chunk_ok((n + kBlock - 1) / kBlock + 1, 1);
  parallel_chunks(n, threads, [&](int64_t begin, int64_t end) {
    chunk_ok[static_cast<size_t>(begin / kBlock)] = range_finite<kKind>(typed, begin, end);
  });
  return std::all_of(chunk_ok.begin(), chunk_ok.end(), [](char ok) { return ok != 0; });
}

}  // namespace

void cpu_adamw_step(float* master, float* exp_avg, float* exp_avg_sq, const void* grad,
                    HalfKind grad_kind, float grad_scale, void* half_param_out, HalfKind out_kind,
                    int64_t n, int64_t step, const AdamWHyper& hyper, int threads) {
  assert(n >= 0 && step >= 1);
  if (n == 0) return;
  assert(master && exp_avg && exp_avg_sq && grad);
  assert(out_kind == HalfKind::kNone || half_param_out);
  const StepConstants c = step_constants(hyper, step, grad_scale);
  parallel_chunks(n, threads, [&](int64_t begin, int64_t end) {
    step_chunk(StepChunk{master, exp_avg, exp_avg_sq, grad, grad_kind, half_param_out, out_kind,
                         begin, end},
               c);
  });
}

bool all_finite(const void* data, HalfKind kind, int64_t n, int threads) {
  assert(n >= 0);
  if (n == 0) return true;
  assert(data);
  switch (kind) {
    case HalfKind::kNone:
      return all_finite_typed<HalfKind::kNone>(data, n, threads);
    case HalfKind::kBf16:
      return all_finite_typed<HalfKind::kBf16>(data, n, threads);
    case HalfKind::kFp16:
      return all_finite_typed<HalfKind::kFp16>(data, n, threads);
  }
  return false;
}

}  // namespace headroom::executor
