"""diffusers' SDXL LoRA training step (examples/text_to_image/train_text_to_image_lora_sdxl.py).

As stacks/diffusers_sd3.py does for SD3, the script's step is mirrored statement by
statement at diffusers 0.39.0, and every part that decides memory is diffusers', PEFT's,
accelerate's or torch's own code:
- the model: `UNet2DConditionModel.from_config` of the config folder, frozen, moved to the
  weight dtype, `enable_gradient_checkpointing()` under `--gradient_checkpointing`,
  `add_adapter(LoraConfig(r, lora_alpha=r, init_lora_weights="gaussian", target_modules=
  ["to_k", "to_q", "to_v", "to_out.0"]))`; the adapters stay bf16 (`cast_training_params`
  only under fp16): stacks/diffusers_flux.py's `build_transformer`;
- the optimizer, scheduler and `accelerator.prepare` (autocast forward under bf16):
  stacks/diffusers_flux.py's `build_training`;
- the step: `randn_like` noise, `torch.randint` timesteps, `DDPMScheduler.add_noise`, the
  six `add_time_ids` in the weight dtype, the forward with `added_cond_kwargs={"time_ids",
  "text_embeds"}`, epsilon target, `F.mse_loss(model_pred.float(), target.float())`,
  `accelerator.backward`, clipping, `optimizer.step()`, `zero_grad()`.
What the oracle replaces: the batch is made at the shapes the VAE and the two text encoders
give it (latents [B, 4, res/8, res/8] in the weight dtype; prompt_embeds [B, 77, 2048] and
the pooled [B, 1280]); the script's resident VAE and text encoders are not built (headroom
builds the UNet alone).
"""

from __future__ import annotations

import torch

from meta_recorder import Recorder
from stacks.diffusers_flux import _DTYPES, run_script
from stacks.diffusers_sdxl_args import SCHEDULER, TEXT_TOKENS, TIME_IDS, VAE_FACTOR, args_of


def sdxl_batch(spec: dict, args: dict, config, weight_dtype) -> dict:
    """What the step reads from the VAE and the text encoders, at their shapes and dtypes."""
    b, side = spec["batch"], spec["resolution"] // VAE_FACTOR
    meta = {"device": "meta", "dtype": weight_dtype}
    text = config.projection_class_embeddings_input_dim - TIME_IDS * config.addition_time_embed_dim
    return {"latents": torch.empty(b, config.in_channels, side, side, **meta),
            "prompt_embeds": torch.empty(b, TEXT_TOKENS, config.cross_attention_dim, **meta),
            "pooled_prompt_embeds": torch.empty(b, text, **meta)}


def run(spec: dict, recorder: Recorder) -> dict:
    from diffusers import DDPMScheduler

    return run_script(spec, recorder, args_of(spec), "UNet2DConditionModel", lambda: DDPMScheduler(**SCHEDULER),
                      sdxl_batch, _forward_backward)


def _forward_backward(args, accelerator, unet, noise_scheduler, batch):
    """The body of the script's step loop from the latents to accelerator.backward."""
    import torch.nn.functional as F

    weight_dtype = _DTYPES[args["mixed_precision"]]
    model_input = batch["latents"]
    noise = torch.randn_like(model_input)
    bsz = model_input.shape[0]
    timesteps = torch.randint(0, noise_scheduler.config.num_train_timesteps, (bsz,), device=model_input.device)
    timesteps = timesteps.long()
    noisy_model_input = noise_scheduler.add_noise(model_input, noise, timesteps)
    side = model_input.shape[-1] * VAE_FACTOR
    add_time_ids = torch.tensor([[side, side, 0, 0, side, side]] * bsz)
    add_time_ids = add_time_ids.to(model_input.device, dtype=weight_dtype)
    unet_added_conditions = {"time_ids": add_time_ids, "text_embeds": batch["pooled_prompt_embeds"]}
    model_pred = unet(noisy_model_input, timesteps, batch["prompt_embeds"],
                      added_cond_kwargs=unet_added_conditions, return_dict=False)[0]
    target = noise
    loss = F.mse_loss(model_pred.float(), target.float(), reduction="mean")
    accelerator.backward(loss)
    return locals()
