"""bitsandbytes 0.50.2's CUDA gemm_4bit dispatch on meta, hand-counted (label oracle).

bench/oracle/bnb_gemm_shims.py: where the release's CUDA kernel function falls back
(M > 1536, or `_gemm_4bit_use_custom_cuda` for the GPU's arch), `_dequant_linear_fallback`
allocates a 16-bit [N, K] weight beside the output; the fused kernel only the output.
Llama-3-8B's down_proj: N = 4096, K = 14336, bf16, blocksize 64.
"""

import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "oracle"))

from bnb_gemm_shims import bnb_gemm_dispatch_on_meta  # noqa: E402
from meta_recorder import Recorder, recording  # noqa: E402

import bitsandbytes  # noqa: E402,F401  (defines torch.ops.bitsandbytes.gemm_4bit)

N, K, BLOCK = 4096, 14336, 64
WEIGHT_BF16 = N * K * 2  # B_dq, 117,440,512 bytes


def gemm_peak(M: int, gpu: str) -> int:
    A = torch.empty(M, K, dtype=torch.bfloat16, device="meta")
    B = torch.empty(N * K // 2, 1, dtype=torch.uint8, device="meta")
    absmax = torch.empty(N * K // BLOCK, dtype=torch.float32, device="meta")
    rec = Recorder()
    with bnb_gemm_dispatch_on_meta(gpu), recording(rec):
        out = torch.ops.bitsandbytes.gemm_4bit.default(A, B, [N, K], absmax, BLOCK, "nf4")
        del out
    return rec.peak_bytes


class GemmDispatchTest(unittest.TestCase):
    def test_past_max_m_the_dequantized_weight_is_allocated(self):
        self.assertEqual(gemm_peak(2048, "h200"), WEIGHT_BF16 + 2048 * N * 2)

    def test_sm90_falls_back_at_m_1024(self):
        # sm90's thresholds in `_gemm_4bit_use_custom_cuda`: a large weight, M past its cap
        self.assertEqual(gemm_peak(1024, "h200"), WEIGHT_BF16 + 1024 * N * 2)

    def test_tiny_m_runs_the_fused_kernel_output_only(self):
        self.assertEqual(gemm_peak(4, "h200"), 4 * N * 2)


if __name__ == "__main__":
    unittest.main()
