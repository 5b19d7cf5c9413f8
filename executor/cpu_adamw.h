// AdamW on the CPU for optimizer offload (ZeRO-Offload style): the fp32 master
// weights and both Adam moments live in host memory, the GPU's 16-bit (or fp32)
// gradients are copied to the host, and one call updates the master weights and
// writes back the 16-bit parameter copy that goes to the GPU. Torch-free.
//
// The update is torch.optim.AdamW's (amsgrad=False, maximize=False), in its
// operation order, in fp32 (docs/cpu-adamw.md gives the formula and its source).
// Results do not depend on the thread count: every element goes through the same
// instructions whatever the chunking.
#pragma once

#include <bit>
#include <cstdint>

namespace headroom::executor {

struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;  // decoupled: the master weights shrink by lr * weight_decay
};

// The element type of a gradient or parameter buffer: kNone is fp32 (for a
// gradient) or "no buffer" (for the 16-bit parameter copy).
enum class HalfKind { kNone, kBf16, kFp16 };

// One AdamW step over n elements, in place on master, exp_avg and exp_avg_sq (fp32).
//  grad: n elements of grad_kind (kNone: float), each multiplied by grad_scale
//    first (1/loss_scale, 1/accumulation steps; 1 for none).
//  half_param_out: when out_kind is not kNone, receives the updated master
//    weights rounded to bf16/fp16 (round to nearest even); may be null otherwise.
//  step: 1-based count of this step (bias correction uses beta**step).
//  threads: worker threads; 0 takes std::thread::hardware_concurrency(). Small n
//    runs on fewer threads (at least 64Ki elements each). Results are
//    bit-identical for every thread count.
// The buffers must not overlap. Non-finite gradients are not checked here:
// callers that scale the loss check all_finite() first and skip the step.
void cpu_adamw_step(float* master, float* exp_avg, float* exp_avg_sq, const void* grad,
                    HalfKind grad_kind, float grad_scale, void* half_param_out, HalfKind out_kind,
                    int64_t n, int64_t step, const AdamWHyper& hyper, int threads);

// True when none of the n elements (of kind; kNone: float) is inf or NaN.
bool all_finite(const void* data, HalfKind kind, int64_t n, int threads);

// Scalar conversions, the ones the step uses (branch-free so that loops over
// them vectorise). Float to 16 bits rounds to nearest, ties to even; NaN stays
// NaN (made quiet, sign kept); values beyond the largest finite round to inf.

// `condition ? if_true : if_false` as bit arithmetic: GCC will not if-convert a
// ternary whose arms hold float operations (they might trap), which would keep
// loops over the converters from vectorising.
inline uint32_t select_bits(bool condition, uint32_t if_true, uint32_t if_false) {
  return if_false ^ ((if_true ^ if_false) & (0u - static_cast<uint32_t>(condition)));
}

inline float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); }

inline uint16_t float_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const bool is_nan = (bits & 0x7fffffffu) > 0x7f800000u;
  // Adding 0x7fff plus the lowest kept bit rounds the dropped 16 bits to nearest
  // even; a carry into the exponent is the correct result (up to inf).
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>(is_nan ? ((bits >> 16) | 0x0040u) : rounded);
}

inline float fp16_to_float(uint16_t bits) {
  const uint32_t sign = uint32_t{bits & 0x8000u} << 16;
  const uint32_t magnitude = bits & 0x7fffu;
  // Normal: move exponent and mantissa into place and rebias (127 - 15 = 112).
  const uint32_t normal = (magnitude << 13) + (112u << 23);
  // Subnormal (and zero): magnitude * 2^-24, exact in float.
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(magnitude)) * 0x1p-24f);
  // Inf and NaN: all-ones exponent, mantissa (NaN payload) kept.
  const uint32_t special = (magnitude << 13) | 0x7f800000u;
  const uint32_t result = select_bits(magnitude < 0x0400u, subnormal,
                                      select_bits(magnitude >= 0x7c00u, special, normal));
  return std::bit_cast<float>(sign | result);
}

inline uint16_t float_to_fp16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  // At or above 65520 (halfway from 65504, the largest fp16, to 65536) rounds to inf.
  const uint32_t overflow = 0x7c00u;
  const uint32_t nan = 0x7e00u | ((magnitude >> 13) & 0x03ffu);
  // Normal (>= 2^-14): rebias the exponent, round the 13 dropped bits to nearest even.
  const uint32_t normal = (magnitude - (112u << 23) + 0x0fffu + ((magnitude >> 13) & 1u)) >> 13;
  // Subnormal (< 2^-14): adding 0.5f makes the float unit in the last place 2^-24
  // (the fp16 subnormal step), so the float addition itself rounds to nearest
  // even; its mantissa is then the fp16 bits (0x400 when it rounds up to 2^-14).
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(std::bit_cast<float>(magnitude) + 0.5f) - 0x3f000000u;
  const uint32_t result =
      select_bits(magnitude > 0x7f800000u, nan,
                  select_bits(magnitude >= 0x477ff000u, overflow,
                              select_bits(magnitude >= 0x38800000u, normal, subnormal)));
  return static_cast<uint16_t>(sign | result);
}

}  // namespace headroom::executor
