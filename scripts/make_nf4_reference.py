#!/usr/bin/env python3
"""Writes tests/data/nf4/bnb_nf4_reference.safetensors: NF4 weights quantized by
bitsandbytes itself, in the state-dict format bitsandbytes saves (Linear4bit:
"<name>.weight" packed uint8 plus "<name>.weight.absmax", ".quant_map",
".nested_absmax", ".nested_quant_map" and ".quant_state.bitsandbytes__nf4"),
with the inputs they came from and bitsandbytes' dequantization of them.
models/torch/nf4.cc is tested against it (tests/models/nf4_test.cc).

"<name>.dequantized" comes from bitsandbytes' device-independent kernel
(backends/default/ops.py _dequantize_4bit_compute), which reads the blocks
flat as every quantize kernel writes them. Its CPU kernel (cdequantize_4bit,
0.50.2) does not: for a weight whose last dimension is not a multiple of 64
it is off by up to 41% of the block's scale (96x80 here), so it is not the
reference.

Not run by the tests: the file is committed. To regenerate (CPU is enough):
  pip install --target /tmp/bnbpkg --no-deps bitsandbytes==0.50.2
  PYTHONPATH=/tmp/bnbpkg .venv/bin/python scripts/make_nf4_reference.py
"""
import os

import bitsandbytes
import bitsandbytes.functional as F
from bitsandbytes.backends.default.ops import _dequantize_4bit_compute
import torch
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "nf4", "bnb_nf4_reference.safetensors")


def case(name, weight, compress_statistics, tensors):
    packed, state = F.quantize_4bit(weight, blocksize=64, compress_statistics=compress_statistics, quant_type="nf4")
    tensors[f"{name}.input"] = weight.contiguous()
    tensors[f"{name}.weight"] = packed.contiguous()
    for key, value in state.as_dict(packed=True).items():
        tensors[f"{name}.weight.{key}"] = value.contiguous()
    absmax = state.absmax
    if compress_statistics:
        absmax = F.dequantize_blockwise(state.absmax, state.state2) + state.offset
    flat = getattr(_dequantize_4bit_compute, "__wrapped__", _dequantize_4bit_compute)
    tensors[f"{name}.dequantized"] = flat(packed.view(-1), absmax.float(), state.code, 64, state.shape, state.dtype)


def main():
    torch.manual_seed(0)
    tensors = {
        "dynamic_map": F.create_dynamic_map(signed=True).contiguous(),
        "nf4_code": F.get_4bit_type("nf4", device="cpu").contiguous(),
    }
    # 7680 weights: 120 blocks of 64, and 120 absmax in one partial block of 256.
    case("double_quant", torch.randn(96, 80, dtype=torch.bfloat16) * 0.05, True, tensors)
    # 1650 weights: a partial last block of 64 (50 weights), fp32 absmax.
    case("plain", torch.randn(33, 50, dtype=torch.float32), False, tensors)
    # More than 256 blocks: a full nested block and a partial one; outliers.
    w = torch.randn(300, 64, dtype=torch.bfloat16)
    w[7, 3] = 40.0
    case("two_nested_blocks", w, True, tensors)
    save_file(tensors, OUT, metadata={"bitsandbytes": bitsandbytes.__version__, "torch": torch.__version__})
    print(f"wrote {os.path.normpath(OUT)} ({len(tensors)} tensors, bitsandbytes {bitsandbytes.__version__})")


if __name__ == "__main__":
    main()
