"""diffusers' SD3 LoRA training step (examples/dreambooth/train_dreambooth_lora_sd3.py).

As stacks/diffusers_flux.py does for Flux, the script's `main()` is mirrored statement by
statement at diffusers 0.39.0, and every part that decides memory is diffusers', PEFT's,
accelerate's or torch's own code:
- the model: `SD3Transformer2DModel.from_config` of the config folder, frozen
  (`requires_grad_(False)`), moved to the weight dtype, `enable_gradient_checkpointing()`
  under `--gradient_checkpointing`, `add_adapter(LoraConfig(r, lora_alpha=r, dropout,
  init_lora_weights="gaussian", its eight attention targets))`; the adapters stay bf16
  (`cast_training_params` only under fp16);
- the optimizer, scheduler and `accelerator.prepare`: stacks/diffusers_flux.py's
  `build_training` (the two scripts make them alike);
- the step: `randn_like` noise, `compute_density_for_timestep_sampling` (logit_normal),
  `get_sigmas`, the flow-matching interpolation, the forward on the [B, 16, res/8, res/8]
  latents with `timestep=timesteps`, `precondition_outputs` (model_pred * -sigmas + noisy
  input, target the latents), `compute_loss_weighting_for_sd3`, the weighted fp32 MSE,
  `accelerator.backward`, clipping, `optimizer.step()`, `zero_grad()`.
What the oracle replaces: the batch is made at the shapes the VAE and text encoders give it
(latents as `--cache_latents` leaves them; prompt embeddings B x (77 CLIP + max_sequence_length
T5) x joint_attention_dim and the pooled B x pooled_projection_dim, as the script computes them
once for an instance prompt and then deletes the three text encoders): no encoder and no VAE is
resident; `get_sigmas` runs on the scheduler's CPU tables (diffusers_flux.py says why).
"""

from __future__ import annotations

import torch

from meta_recorder import Recorder
from stacks.diffusers_flux import _DTYPES, _sigmas, run_script
from stacks.diffusers_sd3_args import CLIP_TOKENS, SCHEDULER, VAE, args_of


def sd3_batch(spec: dict, args: dict, config, weight_dtype) -> dict:
    """What the step reads from the VAE and the text encoders, at their shapes and dtypes."""
    b, side = spec["batch"], spec["resolution"] // 2 ** (VAE["block_out_channels"] - 1)
    meta = {"device": "meta", "dtype": weight_dtype}
    text = CLIP_TOKENS + args["max_sequence_length"]
    return {"latents": torch.empty(b, config.in_channels, side, side, **meta),
            "prompt_embeds": torch.empty(b, text, config.joint_attention_dim, **meta),
            "pooled_prompt_embeds": torch.empty(b, config.pooled_projection_dim, **meta)}


def run(spec: dict, recorder: Recorder) -> dict:
    from diffusers import FlowMatchEulerDiscreteScheduler

    return run_script(spec, recorder, args_of(spec), "SD3Transformer2DModel",
                      lambda: FlowMatchEulerDiscreteScheduler(**SCHEDULER), sd3_batch, _forward_backward)


def _forward_backward(args, accelerator, transformer, noise_scheduler, batch):
    """The body of the script's step loop from the latents to accelerator.backward."""
    from diffusers.training_utils import compute_density_for_timestep_sampling, compute_loss_weighting_for_sd3

    weight_dtype = _DTYPES[args["mixed_precision"]]
    model_input = (batch["latents"] - VAE["shift_factor"]) * VAE["scaling_factor"]
    model_input = model_input.to(dtype=weight_dtype)
    noise = torch.randn_like(model_input)
    bsz = model_input.shape[0]
    u = compute_density_for_timestep_sampling(weighting_scheme=args["weighting_scheme"], batch_size=bsz,
                                              logit_mean=0.0, logit_std=1.0, mode_scale=1.29)
    indices = (u * noise_scheduler.config.num_train_timesteps).long()
    cpu_timesteps = noise_scheduler.timesteps[indices]
    timesteps = cpu_timesteps.to(device=model_input.device)
    sigmas = _sigmas(noise_scheduler, cpu_timesteps, model_input.ndim, model_input.dtype).to(model_input.device)
    noisy_model_input = (1.0 - sigmas) * model_input + sigmas * noise
    model_pred = transformer(hidden_states=noisy_model_input, timestep=timesteps,
                             encoder_hidden_states=batch["prompt_embeds"],
                             pooled_projections=batch["pooled_prompt_embeds"], return_dict=False)[0]
    if args["precondition_outputs"]:
        model_pred = model_pred * (-sigmas) + noisy_model_input
    weighting = compute_loss_weighting_for_sd3(weighting_scheme=args["weighting_scheme"], sigmas=sigmas)
    target = model_input if args["precondition_outputs"] else noise - model_input
    loss = torch.mean((weighting.float() * (model_pred.float() - target.float()) ** 2).reshape(target.shape[0], -1),
                      1)
    loss = loss.mean()
    accelerator.backward(loss)
    return locals()
