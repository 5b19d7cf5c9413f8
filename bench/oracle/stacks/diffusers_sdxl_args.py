"""train_text_to_image_lora_sdxl.py's arguments as a run of the oracle gives them.

No torch: flags.py reads the same values for headroom's side. Defaults are the script's
`parse_args` at diffusers 0.39.0 (examples/text_to_image/train_text_to_image_lora_sdxl.py);
`TARGETS` is its `LoraConfig(target_modules=...)` for the UNet, with `lora_alpha=args.rank`
and no dropout argument (PEFT's default, 0).
"""

from __future__ import annotations

from stacks.diffusers_flux_args import script_args

TARGETS = ["to_k", "to_q", "to_v", "to_out.0"]
DEFAULTS = {"lora_rank": 4, "lora_dropout": 0.0, "mixed_precision": "bf16", "max_grad_norm": 1.0,
            "learning_rate": 1e-4, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_weight_decay": 1e-2,
            "adam_epsilon": 1e-8, "lr_warmup_steps": 500}
TEXT_TOKENS = 77  # encode_prompt: CLIP-L and CLIP-G penultimate states, 77 tokens, cat on the width
TIME_IDS = 6      # compute_time_ids: original size, crop top-left, target size
VAE_FACTOR = 8    # stabilityai/stable-diffusion-xl-base-1.0 vae/config.json: four blocks
# scheduler/scheduler_config.json of the same repository: DDPMScheduler's table.
SCHEDULER = {"num_train_timesteps": 1000, "beta_start": 0.00085, "beta_end": 0.012,
             "beta_schedule": "scaled_linear"}


def args_of(spec: dict) -> dict:
    """The script's arguments: its defaults, overridden by the spec."""
    args = script_args(spec, DEFAULTS, TARGETS, "diffusers-sdxl")
    args["lora_alpha"] = args["lora_rank"]
    return args
