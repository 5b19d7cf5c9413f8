#include "planner/time/gemm_waves.h"

#include <algorithm>

namespace headroom::planner {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

double utilisation(int64_t rows, int64_t cols, int64_t depth, int sm_count, int64_t tile_rows, int64_t tile_cols) {
  const int64_t tiles = ceil_div(rows, tile_rows) * ceil_div(cols, tile_cols);
  const double filled = static_cast<double>(rows) * static_cast<double>(cols) /
                        (static_cast<double>(tiles) * static_cast<double>(tile_rows * tile_cols));
  int64_t splits = 1;
  if (tiles < sm_count) splits = std::max<int64_t>(1, std::min(sm_count / tiles, depth / kSplitKMinDepth));
  const int64_t units = tiles * splits;
  const int64_t waves = ceil_div(units, sm_count);
  return filled * static_cast<double>(units) / static_cast<double>(waves * sm_count);
}

}  // namespace

double gemm_wave_utilisation(int64_t rows, int64_t cols, int64_t depth, int sm_count) {
  if (sm_count <= 0 || rows <= 0 || cols <= 0) return 1.0;
  return std::max(utilisation(rows, cols, depth, sm_count, kGemmTileLong, kGemmTileShort),
                  utilisation(rows, cols, depth, sm_count, kGemmTileShort, kGemmTileLong));
}

}  // namespace headroom::planner
