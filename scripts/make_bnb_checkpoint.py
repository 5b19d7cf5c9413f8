#!/usr/bin/env python3
"""Writes tests/data/hf/tiny-llama-bnb-nf4/: a tiny Llama (hidden 64, 2 layers,
vocab 256) quantized by transformers and bitsandbytes themselves
(BitsAndBytesConfig nf4, double quantization, bf16 compute) and saved with
save_pretrained: config.json with its quantization_config, and a
model.safetensors whose linears are bitsandbytes' NF4 state dicts. The
executor's pre-quantized loading (executor/weights.h load_nf4_states) is tested
on it (tests/executor/torch/weights_test.cc, tests/cli/run_qlora_test.cc).

Not run by the tests: the files are committed. To regenerate (CPU is enough):
  pip install --target /tmp/bnbpkg --no-deps bitsandbytes==0.50.2 accelerate==1.15.0
  PYTHONPATH=/tmp/bnbpkg .venv/bin/python scripts/make_bnb_checkpoint.py
"""
import os
import shutil
import tempfile

import torch
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM

OUT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "tests", "data", "hf", "tiny-llama-bnb-nf4"))


def main():
    config = LlamaConfig(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=4, vocab_size=256, max_position_embeddings=256,
                         tie_word_embeddings=False, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as plain:
        LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(plain)
        quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                          bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)
        model = AutoModelForCausalLM.from_pretrained(plain, quantization_config=quantization, device_map="cpu",
                                                     dtype=torch.bfloat16)
        shutil.rmtree(OUT, ignore_errors=True)
        model.save_pretrained(OUT)
    os.remove(os.path.join(OUT, "generation_config.json"))
    print(f"wrote {OUT}: {sorted(os.listdir(OUT))}")


if __name__ == "__main__":
    main()
