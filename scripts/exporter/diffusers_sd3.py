"""diffusers' SD3Transformer2DModel for the exporter: built from its config, fed as
examples/dreambooth/train_dreambooth_lora_sd3.py feeds it.

S is the image's latent patches, (resolution / 16)^2 (VAE factor 8, patch 2): the
latents are [B, in_channels, 2 side, 2 side] for S = side^2. The prompt is the
script's precomputed embeddings: 77 CLIP tokens (padded to joint_attention_dim)
cat 77 T5 tokens (--max_sequence_length default 77), and the pooled CLIP pair.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Dict

import torch

from errors import ExporterError

CLIP_TOKENS = 77
T5_TOKENS = 77  # train_dreambooth_lora_sd3.py --max_sequence_length default


def sd3_spec(path: Path, raw: Dict[str, Any], build: Callable[[str], torch.nn.Module],
             positive: Callable[..., int], model_spec: type) -> Any:
    """The ModelSpec of an SD3Transformer2DModel config: `build` makes the model (the
    exporter's diffusers builder; JointAttnProcessor2_0 calls F.scaled_dot_product_attention),
    `positive` reads a positive int."""
    in_channels = positive(raw, path, "in_channels", default=16)
    out_channels = positive(raw, path, "out_channels", default=in_channels)
    patch = positive(raw, path, "patch_size", default=2)
    joint = positive(raw, path, "joint_attention_dim", default=4096)
    pooled = positive(raw, path, "pooled_projection_dim", default=2048)
    max_side = positive(raw, path, "pos_embed_max_size", default=96)

    def make_step(batch: int, seq: int, device: torch.device, dtype: torch.dtype, real: bool):
        side = math.isqrt(seq)
        if side * side != seq or side > max_side:
            raise ExporterError(f"{path}: S = {seq}: expected a square number of latent patches, "
                                f"at most pos_embed_max_size^2 = {max_side * max_side}")
        generator = torch.Generator().manual_seed(2)

        def rand(*shape: int) -> torch.Tensor:
            if not real:
                return torch.zeros(shape, dtype=dtype, device=device)
            return torch.randn(shape, generator=generator).to(device, dtype)

        latent = side * patch
        inputs = {"hidden_states": rand(batch, in_channels, latent, latent),
                  "encoder_hidden_states": rand(batch, CLIP_TOKENS + T5_TOKENS, joint),
                  "pooled_projections": rand(batch, pooled),
                  "timestep": torch.full((batch,), 500.0, dtype=dtype, device=device),
                  "target": rand(batch, out_channels, latent, latent)}

        def step(model: torch.nn.Module, given: Dict[str, torch.Tensor]) -> torch.Tensor:
            kwargs = {k: v for k, v in given.items() if k != "target"}
            out = model(**kwargs, return_dict=False)[0]
            # The script's flow-matching loss: MSE in fp32 against the target.
            return torch.nn.functional.mse_loss(out.float(), given["target"].float())

        return inputs, step

    sequence = {"unit": "image", "default_seq": 64 * 64, "max_seq": max_side * max_side,
                "patch_px": 8 * patch, "images": 1, "extra_tokens": 0, "default_resolution": 1024}
    spec = model_spec(path, "sd3", "sd3", build, sequence, "bf16", make_step)
    spec.seq_values = [16, 25, 36, 49]  # square latents (export_graph's S fit)
    spec.flash_follows_q_layout = True  # JointAttnProcessor2_0's cat q: a [B, H, N, D] output

    return spec
