"""Builds a model from its config file alone and makes its inputs at any (B, S).

Why config-only: the exporter must work for a model a user has not downloaded
(and offline), so weights are never read; on the meta device nothing is even
allocated. transformers models are chosen by `architectures[0]` (or by
`model_type` when a config has none); diffusers models by `_class_name`.
Each task fixes what S means and which inputs one training step feeds:

| task        | S is                               | inputs (B = batch)                          |
|-------------|------------------------------------|---------------------------------------------|
| causal_lm   | tokens                             | input_ids, labels [B, S]                    |
| masked_lm   | tokens                             | input_ids, labels [B, S]                    |
| seq_cls     | tokens                             | input_ids [B, S], labels [B]                |
| image_cls   | patches (+ class tokens)           | pixel_values, labels [B]                    |
| contrastive | image patches (+ class token)      | input_ids [B, text positions], pixel_values |
| llava       | language-model tokens, image's too | input_ids, pixel_values, labels             |
| flux        | packed latent tokens (res/16)^2    | latents, T5/CLIP embeddings, ids, timestep  |
| sd3         | latent patches (res/16)^2          | latents, CLIP+T5 embeddings, pooled, timestep |
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import torch
from torch import nn

from config_file import read_config
from errors import ExporterError

Inputs = Dict[str, torch.Tensor]
# (named inputs, a function running the model on them and returning the loss)
StepFn = Callable[[nn.Module, Inputs], torch.Tensor]

# Tokens added to the patches by the image encoders we know (class tokens).
_IMAGE_EXTRA_TOKENS = {"vit": 1, "clip": 1, "clip_vision_model": 1, "siglip": 0,
                       "siglip_vision_model": 0, "deit": 2, "dinov2": 1, "beit": 1}
_SUPPORTED_TASKS = ("causal_lm", "masked_lm", "seq_cls", "image_cls", "contrastive", "llava",
                    "qwen2_5_vl", "flux", "sd3", "seq2seq")
# seq2seq (T5): decoder tokens per sample when the caller sets none; the encoder's S varies.
DEFAULT_TARGET_SEQ = 8


@dataclass
class ModelSpec:
    """A model to trace: how to build it, feed it and what S means for it."""

    config_path: Path
    family: str
    task: str
    build: Callable[[str], nn.Module]  # attention implementation -> module (on current device)
    sequence: Dict[str, int | str]
    param_dtype: str
    # seq -> the size each input needs: text tokens or image side in patches.
    make_step: Callable[[int, int, torch.device, torch.dtype, bool], Tuple[Inputs, StepFn]]
    seq_values: List[int] = field(default_factory=list)  # S values used to fit sizes
    image_px: int = 0  # Qwen2.5-VL: the image's side (headroom's --resolution)
    target_seq: int = 0  # seq2seq: the decoder's tokens per sample (headroom's --target-seq)
    # The flash kernel's output in q's layout, as torch's is (flash_attention.py); SD3
    # only so far: with it, pythia-160m and phi-3-mini-4k (q from a cat under partial
    # rotary) keep one more attention output than their builders count.
    flash_follows_q_layout: bool = False


def _dtype_name(value: object) -> str:
    names = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}
    return names.get(str(value), "bf16")


def _positive(config: Dict[str, Any], path: Path, *keys: str, default: int) -> int:
    for key in keys:
        if key in config and config[key] is not None:
            value = config[key]
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ExporterError(f"{path}: {key}: expected a positive integer, found {value!r}")
            return value
    return default


def load_model_spec(path: Path, task: str | None = None) -> ModelSpec:
    """Reads `path` (config.json or its directory) and picks the builder and the task."""
    config_path = path / "config.json" if path.is_dir() else path
    config = read_config(path)
    if "_class_name" in config:
        return _diffusers_spec(config_path, config)
    return _transformers_spec(config_path, config, task)


# -- transformers -------------------------------------------------------------

def _task_of(config: Dict[str, Any], model_type: str, path: Path) -> str:
    from transformers.models.auto import modeling_auto as auto

    archs = config.get("architectures") or []
    arch = archs[0] if archs and isinstance(archs[0], str) else ""
    if model_type == "llava" or arch.startswith("Llava"):
        return "llava"
    if model_type == "qwen2_5_vl" or arch.startswith("Qwen2_5_VL"):
        return "qwen2_5_vl"
    if model_type in ("clip", "siglip") and arch in ("", "CLIPModel", "SiglipModel"):
        return "contrastive"
    if config.get("is_encoder_decoder") or arch.endswith("ForConditionalGeneration"):
        return "seq2seq"
    for suffix, kind in (("ForCausalLM", "causal_lm"), ("ForMaskedLM", "masked_lm"),
                         ("ForPreTraining", "masked_lm"),
                         ("ForSequenceClassification", "seq_cls"),
                         ("ForImageClassification", "image_cls")):
        if arch.endswith(suffix):
            return kind
    for mapping, kind in ((auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, "causal_lm"),
                          (auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES, "image_cls"),
                          (auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES, "seq_cls")):
        if model_type in mapping:
            return kind
    raise ExporterError(
        f"{path}: model_type {model_type!r} (architectures {archs}) has no task the exporter "
        f"knows how to feed (expected a causal LM, masked LM, sequence or image classifier, "
        f"CLIP/SigLIP, LLaVA, or pass --task one of {', '.join(_SUPPORTED_TASKS)})")


def _one_sequence_per_sample() -> None:
    """Answers transformers' packed-sequence check without reading position values.

    Without an attention mask, transformers looks for several sequences packed in
    one sample by reading position_ids (a data-dependent branch that the meta
    device cannot take). The exporter feeds one sequence per sample, so the
    answer is "not packed", the same as on real data.
    """
    from transformers import masking_utils

    if hasattr(masking_utils, "find_packed_sequence_indices"):
        masking_utils.find_packed_sequence_indices = lambda position_ids: None


def _transformers_spec(path: Path, raw: Dict[str, Any], task: str | None) -> ModelSpec:
    import transformers

    _one_sequence_per_sample()

    model_type = raw.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ExporterError(f"{path}: model_type: expected a string such as \"llama\" (or "
                            f"_class_name for a diffusers model)")
    fields = {k: v for k, v in raw.items() if k not in ("model_type", "transformers_version")}
    try:
        config = transformers.AutoConfig.for_model(model_type, **fields)
    except ValueError:
        raise ExporterError(f"{path}: model_type {model_type!r} is not known to transformers "
                            f"{transformers.__version__} (expected one of its model types, e.g. "
                            f"llama, qwen2, gpt2, bert, vit, clip)") from None
    except (TypeError, KeyError, AttributeError) as error:
        raise ExporterError(f"{path}: the {model_type} config could not be built: {error}") from None
    # Training runs without the generation cache: with it, every layer also copies its
    # keys and values into a DynamicCache that the output holds through backward.
    for sub in (config, getattr(config, "text_config", None)):
        if sub is not None and hasattr(sub, "use_cache"):
            sub.use_cache = False
    task = task or _task_of(raw, model_type, path)
    if task not in _SUPPORTED_TASKS:
        raise ExporterError(f"--task {task!r}: expected one of {', '.join(_SUPPORTED_TASKS)}")
    auto_class = {"causal_lm": "AutoModelForCausalLM", "masked_lm": "AutoModelForMaskedLM",
                  "seq_cls": "AutoModelForSequenceClassification",
                  "image_cls": "AutoModelForImageClassification", "contrastive": "AutoModel",
                  "llava": "AutoModelForImageTextToText",
                  "qwen2_5_vl": "AutoModelForImageTextToText",
                  "seq2seq": "AutoModelForSeq2SeqLM"}[task]

    def build(attention: str) -> nn.Module:
        factory = getattr(transformers, auto_class)
        try:
            return factory.from_config(config, attn_implementation=attention)
        except ValueError as error:
            raise ExporterError(_build_refusal(path, model_type, auto_class, attention, error)) from None

    param_dtype = _dtype_name(raw.get("torch_dtype", raw.get("dtype")))
    if task in ("causal_lm", "masked_lm", "seq_cls"):
        return _text_spec(path, raw, model_type, task, build, param_dtype)
    if task == "seq2seq":
        return _seq2seq_spec(path, raw, model_type, build, param_dtype)
    if task == "image_cls":
        return _image_spec(path, raw, model_type, build, param_dtype)
    if task == "contrastive":
        return _contrastive_spec(path, config, model_type, build, param_dtype)
    if task == "qwen2_5_vl":
        return _qwen25vl_spec(path, config, model_type, build, param_dtype)
    return _llava_spec(path, config, model_type, build, param_dtype)


# State-space and recurrent families: no attention, and a per-token scan loop whose
# graph changes with the sequence length (models/hf_refusals.cc says the same).
_STATE_SPACE = ("mamba", "mamba2", "falcon_mamba", "rwkv")


def _build_refusal(path: Path, model_type: str, auto_class: str, attention: str, error: Exception) -> str:
    """What to do when transformers will not build the model with `attention`: a family
    without attention is not exportable at all; a model class without SDPA (Gemma 2:
    _supports_sdpa False, its softcap refused by SDPA) runs eager when a training run
    names no attn_implementation, so --attention eager exports what it runs."""
    if model_type in _STATE_SPACE:
        return (f"{path}: {model_type} is a state-space / recurrent model (no attention layers): its "
                f"selective scan runs a per-token loop (or CUDA kernels) that cannot be traced into a "
                f"graph whose sizes follow the sequence; write a layer-graph JSON "
                f"(docs/layer-graph-format.md) to price it")
    if attention == "sdpa" and "scaled_dot_product_attention" in str(error):
        return (f"{path}: {model_type}: transformers builds {auto_class} for it without SDPA, and a "
                f"training run that names no attn_implementation runs it eager: export with "
                f"--attention eager")
    return (f"{path}: {model_type} cannot be built as {auto_class} with attention {attention!r}: "
            f"{str(error).splitlines()[0]}")


def _token_sequence(max_position: int) -> Dict[str, int | str]:
    return {"unit": "tokens", "default_seq": min(2048, max_position), "max_seq": max_position}


def _text_spec(path: Path, raw: Dict[str, Any], model_type: str, task: str,
               build: Callable[[str], nn.Module], param_dtype: str) -> ModelSpec:
    max_position = _positive(raw, path, "max_position_embeddings", "n_positions", "n_ctx",
                             "seq_length", default=2048)
    vocab = _positive(raw, path, "vocab_size", default=32000)

    def make_step(batch: int, seq: int, device: torch.device, dtype: torch.dtype,
                  real: bool) -> Tuple[Inputs, StepFn]:
        ids = _token_ids((batch, seq), vocab, device, real)
        labels = ids.clone() if task != "seq_cls" else torch.zeros(batch, dtype=torch.long,
                                                                   device=device)
        inputs = {"input_ids": ids, "labels": labels}

        def step(model: nn.Module, given: Inputs) -> torch.Tensor:
            return model(input_ids=given["input_ids"], labels=given["labels"]).loss

        return inputs, step

    return ModelSpec(path, model_type, task, build, _token_sequence(max_position), param_dtype,
                     make_step)


def _seq2seq_spec(path: Path, raw: Dict[str, Any], model_type: str,
                  build: Callable[[str], nn.Module], param_dtype: str) -> ModelSpec:
    """An encoder-decoder (T5): input_ids [B, S] for the encoder, labels [B, T] for the
    decoder, which T5ForConditionalGeneration shifts right into decoder_input_ids."""
    max_position = _positive(raw, path, "max_position_embeddings", "n_positions", default=512)
    vocab = _positive(raw, path, "vocab_size", default=32128)
    spec = ModelSpec(path, model_type, "seq2seq", build, _token_sequence(max_position),
                     param_dtype, make_step=None, target_seq=DEFAULT_TARGET_SEQ)  # type: ignore[arg-type]

    def make_step(batch: int, seq: int, device: torch.device, dtype: torch.dtype,
                  real: bool) -> Tuple[Inputs, StepFn]:
        inputs = {"input_ids": _token_ids((batch, seq), vocab, device, real),
                  "labels": _token_ids((batch, spec.target_seq), vocab, device, real)}

        def step(model: nn.Module, given: Inputs) -> torch.Tensor:
            return model(input_ids=given["input_ids"], labels=given["labels"]).loss

        return inputs, step

    spec.make_step = make_step  # reads spec.target_seq when called, so a caller may set it
    return spec


def _token_ids(shape: Tuple[int, ...], vocab: int, device: torch.device, real: bool,
               high: int | None = None) -> torch.Tensor:
    if not real:
        return torch.zeros(shape, dtype=torch.long, device=device)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, high or vocab, shape, generator=generator, dtype=torch.long)
    return ids.to(device)


def _pixels(batch: int, channels: int, side_px: int, device: torch.device, dtype: torch.dtype,
            real: bool) -> torch.Tensor:
    if not real:
        return torch.zeros(batch, channels, side_px, side_px, dtype=dtype, device=device)
    generator = torch.Generator().manual_seed(1)
    return torch.randn(batch, channels, side_px, side_px, generator=generator).to(device, dtype)


def _image_sequence(image: int, patch: int, extra: int) -> Dict[str, int | str]:
    seq = (image // patch) ** 2 + extra
    return {"unit": "image", "default_seq": seq, "max_seq": seq, "patch_px": patch, "images": 1,
            "extra_tokens": extra, "default_resolution": image}


def side_for(seq: int, extra: int) -> int:
    """Patches per image side for S tokens; S - extra must be a square."""
    side = math.isqrt(seq - extra)
    if side * side + extra != seq:
        raise ExporterError(f"internal: S = {seq} is not a square number of patches + {extra}")
    return side


def _image_spec(path: Path, raw: Dict[str, Any], model_type: str,
                build: Callable[[str], nn.Module], param_dtype: str) -> ModelSpec:
    extra = _IMAGE_EXTRA_TOKENS.get(model_type)
    if extra is None:
        raise ExporterError(f"{path}: image model_type {model_type!r}: the exporter does not know "
                            f"how many tokens it adds to the patches (known: "
                            f"{', '.join(sorted(_IMAGE_EXTRA_TOKENS))})")
    image = _positive(raw, path, "image_size", default=224)
    patch = _positive(raw, path, "patch_size", default=16)
    channels = _positive(raw, path, "num_channels", default=3)

    def make_step(batch: int, seq: int, device: torch.device, dtype: torch.dtype,
                  real: bool) -> Tuple[Inputs, StepFn]:
        pixels = _pixels(batch, channels, side_for(seq, extra) * patch, device, dtype, real)
        inputs = {"pixel_values": pixels,
                  "labels": torch.zeros(batch, dtype=torch.long, device=device)}

        def step(model: nn.Module, given: Inputs) -> torch.Tensor:
            return model(pixel_values=given["pixel_values"], labels=given["labels"],
                         interpolate_pos_encoding=True).loss

        return inputs, step

    return ModelSpec(path, model_type, "image_cls", build, _image_sequence(image, patch, extra),
                     param_dtype, make_step)


def _contrastive_spec(path: Path, config: Any, model_type: str,
                      build: Callable[[str], nn.Module], param_dtype: str) -> ModelSpec:
    vision, text = config.vision_config, config.text_config
    extra = _IMAGE_EXTRA_TOKENS[model_type]
    text_tokens = text.max_position_embeddings

    def make_step(batch: int, seq: int, device: torch.device, dtype: torch.dtype,
                  real: bool) -> Tuple[Inputs, StepFn]:
        pixels = _pixels(batch, vision.num_channels, side_for(seq, extra) * vision.patch_size,
                         device, dtype, real)
        ids = _token_ids((batch, text_tokens), text.vocab_size, device, real)
        inputs = {"input_ids": ids, "pixel_values": pixels}

        def step(model: nn.Module, given: Inputs) -> torch.Tensor:
            return model(input_ids=given["input_ids"], pixel_values=given["pixel_values"],
                         return_loss=True, interpolate_pos_encoding=True).loss

        return inputs, step

    return ModelSpec(path, model_type, "contrastive", build,
                     _image_sequence(vision.image_size, vision.patch_size, extra), param_dtype,
                     make_step)


def _ids_with_image(path: Path, shape: Tuple[int, int], vocab: int, image_token: int, image_tokens: int,
                    device: torch.device, real: bool) -> torch.Tensor:
    """Token ids [B, S] whose positions 1..image_tokens are the image placeholder and the
    rest text ids below it: one image a sample, as LLaVA's and Qwen2.5-VL's processors
    lay it out."""
    if shape[1] <= image_tokens:
        raise ExporterError(f"{path}: S = {shape[1]} leaves no room for text beside the "
                            f"{image_tokens} image tokens")
    ids = _token_ids(shape, vocab, device, real, high=min(vocab, image_token))
    ids[:, 1:1 + image_tokens] = image_token
    return ids


def _llava_spec(path: Path, config: Any, model_type: str, build: Callable[[str], nn.Module],
                param_dtype: str) -> ModelSpec:
    vision, text = config.vision_config, config.text_config
    patches = (vision.image_size // vision.patch_size) ** 2
    image_tokens = patches + (1 if config.vision_feature_select_strategy == "full" else 0)
    image_token = config.image_token_id

    def make_step(batch: int, seq: int, device: torch.device, dtype: torch.dtype,
                  real: bool) -> Tuple[Inputs, StepFn]:
        ids = _ids_with_image(path, (batch, seq), text.vocab_size, image_token, image_tokens, device, real)
        pixels = _pixels(batch, vision.num_channels, vision.image_size, device, dtype, real)
        inputs = {"input_ids": ids, "pixel_values": pixels, "labels": ids.clone()}

        def step(model: nn.Module, given: Inputs) -> torch.Tensor:
            return model(input_ids=given["input_ids"], pixel_values=given["pixel_values"],
                         labels=given["labels"]).loss

        return inputs, step

    spec = ModelSpec(path, model_type, "llava", build,
                     _token_sequence(text.max_position_embeddings), param_dtype, make_step)
    spec.seq_values = [image_tokens + n for n in (8, 12, 16, 20)]
    return spec


def _qwen25vl_spec(path: Path, config: Any, model_type: str, build: Callable[[str], nn.Module],
                   param_dtype: str) -> ModelSpec:
    """Qwen2_5_VLForConditionalGeneration with one square image a sample, two windows a side
    (2 x window_size px, a multiple of patch x merge): the processor's pixel_values
    [patches, 3 x temporal x patch^2], image_grid_thw and the image's placeholder tokens."""
    vision, text = config.vision_config, config.text_config
    side = 2 * vision.window_size
    grid = side // vision.patch_size
    patches = grid * grid
    image_tokens = patches // vision.spatial_merge_size ** 2
    image_token = config.image_token_id
    values = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2

    def make_step(batch: int, seq: int, device: torch.device, dtype: torch.dtype,
                  real: bool) -> Tuple[Inputs, StepFn]:
        if not real:
            raise ExporterError(f"{path}: Qwen2.5-VL's vision tower reads image_grid_thw's values "
                                f"(.tolist() in vision_utils.py), which the meta device has not: "
                                f"export a small config with --device cpu")
        ids = _ids_with_image(path, (batch, seq), text.vocab_size, image_token, image_tokens, device, real)
        generator = torch.Generator().manual_seed(1)
        pixels = torch.randn(batch * patches, values, generator=generator).to(device, torch.float32)
        grid_thw = torch.tensor([[1, grid, grid]] * batch, dtype=torch.long, device=device)
        inputs = {"input_ids": ids, "pixel_values": pixels, "image_grid_thw": grid_thw,
                  "labels": ids.clone()}

        def step(model: nn.Module, given: Inputs) -> torch.Tensor:
            return model(input_ids=given["input_ids"], pixel_values=given["pixel_values"],
                         image_grid_thw=given["image_grid_thw"], labels=given["labels"]).loss

        return inputs, step

    spec = ModelSpec(path, model_type, "qwen2_5_vl", build,
                     _token_sequence(text.max_position_embeddings), param_dtype, make_step)
    spec.seq_values = [image_tokens + n for n in (8, 12, 16, 20)]
    spec.image_px = side
    return spec


# -- diffusers ----------------------------------------------------------------

_FLUX_TEXT_TOKENS = 512  # T5 length of the FLUX.1-dev pipeline (max_sequence_length)


def _diffusers_build(path: Path, raw: Dict[str, Any], name: str) -> Callable[[str], nn.Module]:
    """The model's `build`: diffusers' class `name` from the config's fields (the keys
    without a leading underscore), a refusal naming the file when it cannot be built."""
    import diffusers

    cls = getattr(diffusers, name)
    fields = {k: v for k, v in raw.items() if not k.startswith("_")}

    def build(attention: str) -> nn.Module:
        del attention  # diffusers' processors call F.scaled_dot_product_attention
        try:
            return cls.from_config(fields)
        except (TypeError, ValueError) as error:
            raise ExporterError(f"{path}: {name} could not be built: {error}") from None

    return build


def _diffusers_spec(path: Path, raw: Dict[str, Any]) -> ModelSpec:
    name = raw.get("_class_name")
    if name == "SD3Transformer2DModel":
        from diffusers_sd3 import sd3_spec
        return sd3_spec(path, raw, _diffusers_build(path, raw, name), _positive, ModelSpec)
    if name != "FluxTransformer2DModel":
        raise ExporterError(f"{path}: _class_name {name!r}: the exporter feeds only diffusers' "
                            f"FluxTransformer2DModel and SD3Transformer2DModel (expected one of those)")
    build = _diffusers_build(path, raw, name)

    in_channels = _positive(raw, path, "in_channels", default=64)
    joint = _positive(raw, path, "joint_attention_dim", default=4096)
    pooled = _positive(raw, path, "pooled_projection_dim", default=768)
    guidance = bool(raw.get("guidance_embeds", False))

    def make_step(batch: int, seq: int, device: torch.device, dtype: torch.dtype,
                  real: bool) -> Tuple[Inputs, StepFn]:
        generator = torch.Generator().manual_seed(2)

        def rand(*shape: int) -> torch.Tensor:
            if not real:
                return torch.zeros(shape, dtype=dtype, device=device)
            return torch.randn(shape, generator=generator).to(device, dtype)

        text = _FLUX_TEXT_TOKENS
        side = max(1, math.isqrt(seq))
        img_ids = torch.zeros(seq, 3, dtype=dtype, device=device)
        if real:
            rows = torch.arange(seq) // side
            img_ids = torch.stack([torch.zeros(seq), rows.float(), (torch.arange(seq) % side).float()],
                                  dim=1).to(device, dtype)
        inputs = {"hidden_states": rand(batch, seq, in_channels),
                  "encoder_hidden_states": rand(batch, text, joint),
                  "pooled_projections": rand(batch, pooled),
                  "timestep": torch.full((batch,), 0.5, dtype=dtype, device=device),
                  "img_ids": img_ids,
                  "txt_ids": torch.zeros(text, 3, dtype=dtype, device=device),
                  "target": rand(batch, seq, in_channels)}
        if guidance:
            inputs["guidance"] = torch.full((batch,), 3.5, dtype=dtype, device=device)

        def step(model: nn.Module, given: Inputs) -> torch.Tensor:
            kwargs = {k: v for k, v in given.items() if k != "target"}
            out = model(**kwargs, return_dict=False)[0]
            # The flow-matching loss of diffusers' Flux trainers: MSE against a target.
            return torch.nn.functional.mse_loss(out.float(), given["target"].float())

        return inputs, step

    sequence = {"unit": "image", "default_seq": 64 * 64, "max_seq": 128 * 128, "patch_px": 16,
                "images": 1, "extra_tokens": 0, "default_resolution": 1024}
    return ModelSpec(path, "flux", "flux", build, sequence, "bf16", make_step)
