// How much of a GPU's tensor-core rate one GEMM can use, from its output shape
// alone: cuBLAS cuts the output into thread-block tiles and runs them in waves of
// one tile per SM (NVIDIA, "Matrix Multiplication Background User's Guide",
// DU-09799-001, sections 3.1 "Tile Quantization" and 3.2 "Wave Quantization").
// A partly filled edge tile and a partly filled last wave cost as much as full
// ones. The time model divides a GEMM's FLOPs by this fraction; the catalogue's
// matmul_efficiency (a best-shape benchmark, where both losses vanish) stays the
// rate of the useful work.
#pragma once

#include <cstdint>

namespace headroom::planner {

// cuBLAS's largest tensor-core tile, 256 x 128 (either way round), one per SM at a
// time: the guide's section 2.3 (larger tiles reuse more data and run fastest) and
// its worked example in 3.2 (A100, 108 SMs: a wave is 108 such tiles).
inline constexpr int64_t kGemmTileLong = 256;
inline constexpr int64_t kGemmTileShort = 128;
// An output of fewer tiles than SMs is split along K across thread blocks (CUTLASS
// media/docs/efficient_gemm.md, "Parallelized Reductions: Split K"); our choice,
// not a cuBLAS figure: a slice is at least one tile edge deep, so a shallow
// reduction (a LoRA rank) is not split.
inline constexpr int64_t kSplitKMinDepth = 128;

// Fraction of the SMs' tile slots, over every wave, that hold useful output
// elements of a [rows x cols] result with a `depth`-long reduction, on a GPU of
// `sm_count` SMs; in (0, 1]. The tile orientation that fills best is taken; an
// output of fewer tiles than SMs is split along K (each split a tile of its own)
// as far as the depth allows. 1 when sm_count is unknown (0).
double gemm_wave_utilisation(int64_t rows, int64_t cols, int64_t depth, int sm_count);

}  // namespace headroom::planner
