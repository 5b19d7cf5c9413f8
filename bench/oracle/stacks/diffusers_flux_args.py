"""train_dreambooth_lora_flux.py's arguments as a run of the oracle gives them.

No torch: flags.py reads the same values for headroom's side (one source for the
LoRA targets, rank and dropout). Defaults are the script's `parse_args` at diffusers
0.39.0; its `target_modules` list is the one `main()` uses when `--lora_layers` is unset.
"""

from __future__ import annotations

# train_dreambooth_lora_flux.py parse_args defaults and its target_modules list
TARGETS = ["attn.to_k", "attn.to_q", "attn.to_v", "attn.to_out.0", "attn.add_k_proj", "attn.add_q_proj",
           "attn.add_v_proj", "attn.to_add_out", "ff.net.0.proj", "ff.net.2", "ff_context.net.0.proj",
           "ff_context.net.2"]
DEFAULTS = {"lora_rank": 4, "lora_alpha": 4, "lora_dropout": 0.0, "mixed_precision": "bf16",
            "max_sequence_length": 512, "guidance_scale": 3.5, "weighting_scheme": "none",
            "max_grad_norm": 1.0, "learning_rate": 1e-4, "adam_beta1": 0.9, "adam_beta2": 0.999,
            "adam_weight_decay": 1e-4, "adam_epsilon": 1e-8, "lr_warmup_steps": 500}
# black-forest-labs/FLUX.1-dev vae/config.json and scheduler/scheduler_config.json: the
# values the step reads (the VAE's shift, scale and depth; the timesteps). Its 16 latent
# channels are the transformer's in_channels / 4 (_pack_latents packs 2 x 2 patches).
VAE = {"shift_factor": 0.1159, "scaling_factor": 0.3611, "block_out_channels": 4}
SCHEDULER = {"num_train_timesteps": 1000, "shift": 3.0, "use_dynamic_shifting": True,
             "base_shift": 0.5, "max_shift": 1.15, "base_image_seq_len": 256, "max_image_seq_len": 4096}
CHECKPOINTING = ("none", "non-reentrant")  # ModelMixin.enable_gradient_checkpointing: use_reentrant=False


def script_args(spec: dict, defaults: dict, targets: list, stack: str) -> dict:
    """A diffusers training script's arguments: its `defaults` and LoRA `targets`,
    overridden by the spec (`stack` names the oracle stack in a refusal)."""
    args = dict(defaults, **{k: spec[k] for k in defaults if k in spec})
    args["lora_targets"] = spec.get("lora_targets", targets)
    args["checkpointing"] = spec.get("checkpointing", "none")
    if args["checkpointing"] not in CHECKPOINTING:
        raise ValueError(f"{stack}: checkpointing: expected none or non-reentrant "
                         "(enable_gradient_checkpointing)")
    return args


def args_of(spec: dict) -> dict:
    """The script's arguments: its defaults, overridden by the spec."""
    return script_args(spec, DEFAULTS, TARGETS, "diffusers-flux")
