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
What the oracle replaces: without `encoders`, the batch is made at the shapes the VAE and the
two text encoders give it (latents [B, 4, res/8, res/8] in the weight dtype; prompt_embeds
[B, 77, 2048] and the pooled [B, 1280]) and neither is built (headroom builds the UNet alone).
With `encoders` (a folder laid out as the pipeline's: vae/, text_encoder/, text_encoder_2/
config.json), the script's resident modules are built as main() loads them: `AutoencoderKL`,
`CLIPTextModel`, `CLIPTextModelWithProjection` (from_pretrained's eval mode), `requires_grad_(False)`,
the VAE in fp32 (`vae.to(..., dtype=torch.float32)` when `--pretrained_vae_model_name_or_path` is
unset; `fixed_vae` gives the weight dtype), both text encoders in the weight dtype; the batch is
the collate_fn's fp32 `pixel_values` [B, 3, res, res] and the two [B, 77] token ids, and each step
encodes them as the loop does before the UNet (`vae.encode(pixel_values).latent_dist.sample()`,
`* scaling_factor`, `.to(weight_dtype)`; `encode_prompt` with `output_hidden_states=True`: the
penultimate states of both concatenated, the second encoder's pooled projection), outside
autocast and without `torch.no_grad()`: the modules are frozen and their inputs need no grad, so
autograd records nothing.
"""

from __future__ import annotations

import functools
import json
import os

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


def _config(folder: str, part: str) -> dict:
    with open(os.path.join(folder, part, "config.json")) as f:
        return {k: v for k, v in json.load(f).items() if not k.startswith("_")}


def build_encoders(spec: dict, weight_dtype) -> dict:
    """main()'s VAE and two text encoders, frozen, in the dtypes it moves them to."""
    from diffusers import AutoencoderKL
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    folder = spec["encoders"]
    with torch.device("meta"):
        vae = AutoencoderKL.from_config(_config(folder, "vae"))
        one = CLIPTextModel._from_config(CLIPTextConfig(**_config(folder, "text_encoder")))
        two = CLIPTextModelWithProjection._from_config(CLIPTextConfig(**_config(folder, "text_encoder_2")))
    for module in (vae, one, two):
        module.eval()  # from_pretrained returns modules in eval mode
        module.requires_grad_(False)
    vae.to(dtype=weight_dtype if spec.get("fixed_vae") else torch.float32)
    one.to(dtype=weight_dtype)
    two.to(dtype=weight_dtype)
    return {"vae": vae, "text_encoders": [one, two]}


def pixel_batch(spec: dict, args: dict, config, weight_dtype) -> dict:
    """collate_fn's batch: fp32 pixel values and both tokenizers' [B, 77] ids."""
    b, res = spec["batch"], spec["resolution"]
    ids = {"device": "meta", "dtype": torch.long}
    return {"pixel_values": torch.empty(b, 3, res, res, device="meta", dtype=torch.float32),
            "input_ids_one": torch.empty(b, TEXT_TOKENS, **ids), "input_ids_two": torch.empty(b, TEXT_TOKENS, **ids)}


def encode_prompt(text_encoders, text_input_ids_list):
    """The script's encode_prompt (tokenizers None): penultimate hidden states of both
    encoders concatenated on the width; the last encoder's first output is the pooled."""
    prompt_embeds_list = []
    for text_encoder, text_input_ids in zip(text_encoders, text_input_ids_list):
        prompt_embeds = text_encoder(text_input_ids, output_hidden_states=True, return_dict=False)
        pooled_prompt_embeds = prompt_embeds[0]
        prompt_embeds = prompt_embeds[-1][-2]
        bs_embed, seq_len, _ = prompt_embeds.shape
        prompt_embeds_list.append(prompt_embeds.view(bs_embed, seq_len, -1))
    prompt_embeds = torch.concat(prompt_embeds_list, dim=-1)
    return prompt_embeds, pooled_prompt_embeds.view(bs_embed, -1)


def _encode(encoders, spec, args, batch) -> dict:
    """The loop's VAE encode and encode_prompt, before the UNet (module docstring)."""
    weight_dtype = _DTYPES[args["mixed_precision"]]
    vae = encoders["vae"]
    pixel_values = batch["pixel_values"].to(dtype=weight_dtype) if spec.get("fixed_vae") else batch["pixel_values"]
    model_input = vae.encode(pixel_values).latent_dist.sample()
    model_input = model_input * vae.config.scaling_factor
    if not spec.get("fixed_vae"):
        model_input = model_input.to(weight_dtype)
    prompt_embeds, pooled = encode_prompt(encoders["text_encoders"], [batch["input_ids_one"], batch["input_ids_two"]])
    return {"latents": model_input, "prompt_embeds": prompt_embeds, "pooled_prompt_embeds": pooled}


def run(spec: dict, recorder: Recorder) -> dict:
    from diffusers import DDPMScheduler

    args = args_of(spec)
    scheduler = functools.partial(DDPMScheduler, **SCHEDULER)
    if "encoders" not in spec:
        return run_script(spec, recorder, args, "UNet2DConditionModel", scheduler, sdxl_batch, _forward_backward)
    encoders = build_encoders(spec, _DTYPES[args["mixed_precision"]])
    step = functools.partial(_encode_forward_backward, encoders, spec)
    return run_script(spec, recorder, args, "UNet2DConditionModel", scheduler, pixel_batch, step,
                      resident=[encoders["vae"], *encoders["text_encoders"]])


def _encode_forward_backward(encoders, spec, args, accelerator, unet, noise_scheduler, batch):
    """The loop body with the encoders resident: encode, then the UNet step."""
    # the loop's `batch` (pixel values, ids) is held by the caller, as the script's loop variable
    # holds it, and the encodings by the returned locals, as the script's names hold them
    return _forward_backward(args, accelerator, unet, noise_scheduler, _encode(encoders, spec, args, batch))


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
