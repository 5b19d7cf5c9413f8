#include "planner/mechanisms/bnb_gemm_dispatch.h"

// A port of bitsandbytes 0.50.2 backends/cuda/ops.py: the CUDA kernel function of
// bitsandbytes::gemm_4bit (register_kernel("bitsandbytes::gemm_4bit", "cuda")) and the
// per-arch heuristic it asks, _gemm_4bit_use_custom_cuda(device_index, dtype, M, N, K).
// Each branch keeps the release's order and thresholds; the function names below say
// which block of the heuristic they are. 0.50.0 and 0.50.1 differ only for sm121
// (GB10), a GPU the catalogue does not hold.

namespace headroom::planner {
namespace {

// _GEMM_4BIT_CUSTOM_FLOOR_M: up to 4 rows the fused kernel always runs.
constexpr int64_t kCustomFloorM = 4;
// _gemm_4bit_custom_max_m on CUDA: past 1536 rows the fallback always runs.
constexpr int64_t kCustomMaxM = 1536;
// "Small-weight path (N*K < 4MB)".
constexpr int64_t kSmallWeight = int64_t{4} * 1024 * 1024;

struct Dispatch {
  int64_t m, n, k, n_blocks, sms;
  bool sm75, sm80, sm86, sm90, sm120, sm121;
  bool hbm() const { return sm80 || sm90; }
};

// N*K < 4M with K*2 < N: "very short K".
bool short_k_small_weight(const Dispatch& d) {
  if (d.hbm()) {
    const bool low_wave = d.n_blocks * 3 < d.sms;
    if (d.sm80) return d.m <= (low_wave ? 1536 : 512);
    return d.m <= (low_wave ? 512 : 320);
  }
  if (d.sm75) {
    if (d.n_blocks >= d.sms * 3) return d.m <= 320;
    if (d.k >= 1024) return d.m <= 64;
    if (d.k >= 704) return d.m <= 96;
    return d.m <= 320;
  }
  if (d.n_blocks >= d.sms) return d.m <= 320;
  return d.n_blocks * d.k > d.sms * 320 ? d.m <= 192 : d.m <= 320;
}

// N*K < 4M: the small-weight path.
bool small_weight(const Dispatch& d) {
  if (d.k * 2 < d.n) return short_k_small_weight(d);
  const bool quarter_wave = d.n_blocks * 4 <= d.sms;
  if (d.sm80 && quarter_wave) {
    if (d.k >= d.n) return d.m <= (d.n_blocks * 8 <= d.sms ? 32 : 128);
    return d.m <= 384;
  }
  if (d.sm75 && d.n_blocks < d.sms && d.m > 8) return d.m <= 64;
  if (quarter_wave) return d.m <= ((d.k < d.n || d.hbm()) ? 32 : 23);
  if (d.n_blocks * 2 <= d.sms) return d.m <= 16;
  return false;
}

// M in 5..7 of a large weight: the fused kernel, but for HBM's listed exceptions.
bool below_eight_rows(const Dispatch& d) {
  const int64_t hbm_m67_thresh = d.sm90 ? 36 : 48;
  if (!d.hbm() || d.m < 6 || d.n_blocks < hbm_m67_thresh) return true;
  const bool lt_75pct_wave = d.n_blocks * 4 < d.sms * 3;
  const bool lt_60pct_wave = d.n_blocks * 5 < d.sms * 3;
  if (d.k > d.n && lt_75pct_wave) return false;
  if (d.k == d.n) {
    if (d.sm80 && lt_60pct_wave) return false;
    if (d.sm90 && lt_75pct_wave && !lt_60pct_wave) return false;
  }
  return true;
}

bool sm75_tiers(const Dispatch& d) {
  if (d.n_blocks >= d.sms * 3) return d.m <= (d.k < d.n ? 128 : 64);
  if (d.n_blocks >= d.sms / 2) return d.m <= 64;
  return d.m <= 32;
}

bool sm80_tiers(const Dispatch& d) {
  if (d.n_blocks >= d.sms * 3) return d.m <= 128;
  if (d.n_blocks >= d.sms) return d.m <= (d.k < d.n ? 64 : 32);
  if (d.k >= d.n * 3 && d.n_blocks * 4 > d.sms) return false;
  if (d.k == d.n && d.n_blocks >= 48 && d.n_blocks * 5 < d.sms * 3) return false;
  if (d.n_blocks * 2 < d.sms) {
    if (d.k <= d.n) return d.m <= 128;
    if (d.n_blocks * 3 >= d.sms) return false;
  }
  if (d.n_blocks >= d.sms / 2 && d.k < d.n) return d.m <= 128;
  return d.m <= 16;
}

bool sm86_tiers(const Dispatch& d) {
  if (d.n_blocks >= d.sms) return d.m <= 128;
  if (d.n_blocks >= d.sms / 2) return d.m <= 64;
  return d.m <= 16;
}

bool sm90_tiers(const Dispatch& d) {
  if (d.n_blocks >= d.sms * 3) return d.m <= 64;
  if (d.n_blocks >= d.sms * 2) return d.m <= 48;
  if (d.n_blocks >= d.sms) return d.m <= 32;
  if (d.n_blocks >= d.sms / 2) {
    if (d.k >= d.n && d.n_blocks * 4 < d.sms * 3) return false;
    return d.m <= 16;
  }
  return false;
}

bool sm120_tiers(const Dispatch& d) {
  const bool tall_k_2xn = d.k > d.n * 2;
  if (d.n_blocks >= d.sms * 3) return d.m <= 256;
  if (d.n_blocks >= d.sms * 2) return d.m <= 128;
  if (d.n_blocks * 5 >= d.sms * 4) return d.m <= (d.k >= d.n ? 96 : 64);
  if (d.n_blocks >= d.sms) return d.m <= 64;
  if (d.n_blocks >= d.sms / 2) return d.m <= ((d.k * 2 >= d.n && d.n_blocks >= 128) ? 64 : 8);
  if (tall_k_2xn && d.n_blocks > 64) return d.m <= 16;
  return d.m <= 8;
}

// "Fallback: sm89 (4090, L40S, L4), sm121 below one wave, unrecognized arches."
bool sm89_tiers(const Dispatch& d) {
  const bool tall_k_2xn = d.k > d.n * 2;
  if (d.n_blocks >= d.sms * 3) return d.m <= 256;
  if (d.n_blocks >= d.sms * 2) return d.m <= 128;
  if (d.n_blocks * 5 >= d.sms * 4) {
    if (tall_k_2xn || d.n_blocks >= 200) return d.m <= 128;
    if (d.k >= d.n) return d.m <= (d.sms >= 60 ? 128 : 32);
    return d.m <= 64;
  }
  if (d.n_blocks >= d.sms / 2) {
    if (tall_k_2xn) return d.m <= 64;
    if (d.n_blocks >= 64) return d.m <= 8;
    return d.m <= 32;
  }
  if (d.k > d.n && d.n_blocks <= 48) return d.m <= (d.k >= d.n * 3 ? 12 : 10);
  return d.m <= ((tall_k_2xn || d.n_blocks < 48) ? 16 : 8);
}

// M in [8, 512] of a large weight: the per-arch tier ladders.
bool tier_ladders(const Dispatch& d) {
  if (d.sm75) return sm75_tiers(d);
  if (d.sm80) return sm80_tiers(d);
  if (d.sm86) return sm86_tiers(d);
  if (d.sm90) return sm90_tiers(d);
  if (d.sm121 && d.n_blocks >= d.sms) return d.m <= 256;
  if (d.sm120) return sm120_tiers(d);
  return sm89_tiers(d);
}

// sm100 (B200/B300) "exits early at top of function".
bool sm100(const Dispatch& d) {
  if (d.n_blocks >= d.sms * 3) return d.m <= 32;
  if (d.n_blocks >= d.sms) return d.k >= d.n ? false : d.m <= 8;
  return false;
}

// _gemm_4bit_use_custom_cuda.
bool use_custom_cuda(const GemmArch& arch, graph::DType dtype, const GemmShape& shape) {
  if (shape.m <= kCustomFloorM) return true;
  const int major = arch.major;
  const int minor = arch.minor;
  const Dispatch d{shape.m,          shape.n,
                   shape.k,          (shape.n + 63) / 64,
                   arch.sm_count,    major == 7 && minor == 5,
                   major == 8 && minor == 0, major == 8 && minor == 6,
                   major == 9,       major == 12 && minor == 0,
                   major == 12 && minor == 1};
  // fp32, pre-sm75 and sm75 without fp16 have no MMA kernel: SIMT only (M < 8).
  if (dtype == graph::DType::kF32 || major < 7) return d.m < 8;
  if (major == 7 && (minor < 5 || dtype != graph::DType::kF16)) return d.m < 8;
  if ((major == 8 && minor == 7) || major == 11) return false;  // sm87, sm110: not calibrated
  if (major == 10) return sm100(d);
  if (d.n * d.k < kSmallWeight) return small_weight(d);
  if (d.m > 512) return false;
  if (d.m < 8) return below_eight_rows(d);
  return tier_ladders(d);
}

}  // namespace

bool bnb_gemm_4bit_fused(const GemmArch& arch, graph::DType dtype, const GemmShape& shape) {
  if (shape.m > kCustomMaxM) return false;
  // A K the blocksize does not divide warns and falls back.
  if (shape.blocksize <= 0 || shape.k % shape.blocksize != 0) return false;
  return use_custom_cuda(arch, dtype, shape);
}

}  // namespace headroom::planner
