"""train_dreambooth_lora_sd3.py's arguments as a run of the oracle gives them.

No torch: flags.py reads the same values for headroom's side. Defaults are the script's
`parse_args` at diffusers 0.39.0 (the script is unchanged from 387a47156e, before the
release, to it); `TARGETS` is the list `main()` uses when `--lora_layers` is unset, and the
script sets `lora_alpha=args.rank`.
"""

from __future__ import annotations

from stacks.diffusers_flux_args import script_args

TARGETS = ["attn.add_k_proj", "attn.add_q_proj", "attn.add_v_proj", "attn.to_add_out", "attn.to_k",
           "attn.to_out.0", "attn.to_q", "attn.to_v"]
DEFAULTS = {"lora_rank": 4, "lora_dropout": 0.0, "mixed_precision": "bf16", "max_sequence_length": 77,
            "weighting_scheme": "logit_normal", "precondition_outputs": 1, "max_grad_norm": 1.0,
            "learning_rate": 1e-4, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_weight_decay": 1e-4,
            "adam_epsilon": 1e-8, "lr_warmup_steps": 500}
CLIP_TOKENS = 77  # encode_prompt: CLIP-L and CLIP-G at max_length 77, padded to T5's width, cat T5's
# stabilityai/stable-diffusion-3-medium-diffusers vae/config.json (shared by SD3.5) and
# scheduler/scheduler_config.json: the values the step reads.
VAE = {"shift_factor": 0.0609, "scaling_factor": 1.5305, "block_out_channels": 4}
SCHEDULER = {"num_train_timesteps": 1000, "shift": 3.0}


def args_of(spec: dict) -> dict:
    """The script's arguments: its defaults, overridden by the spec."""
    args = script_args(spec, DEFAULTS, TARGETS, "diffusers-sd3")
    args["lora_alpha"] = args["lora_rank"]
    return args
