"""PEFT's own count of LoRA adapter parameters for `target_modules="all-linear"`.

Run in the oracle's `trl` environment (PEFT 0.21.2, transformers 5.23.0): builds each
config.json's model on the meta device, applies LoraConfig(r=16, target_modules="all-linear")
and prints the adapter parameters and which module kinds PEFT wrapped. The figures held by
tests/planner/peft_targets_test.cc come from here (docs/stacks.md, "LoRA targets").

    .venv-oracle/trl/bin/python bench/oracle/peft_all_linear.py tests/data/hf/phi-3-mini-4k ...
"""

import collections
import re
import sys

import torch
import transformers
from peft import LoraConfig, get_peft_model


def build(path: str) -> torch.nn.Module:
    config = transformers.AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        try:
            return transformers.AutoModelForCausalLM.from_config(config)
        except ValueError:
            return transformers.AutoModelForImageTextToText.from_config(config)


def main() -> int:
    for path in sys.argv[1:]:
        model = get_peft_model(build(path), LoraConfig(r=16, target_modules="all-linear"))
        adapters = sum(p.numel() for name, p in model.named_parameters() if "lora_" in name)
        kinds = collections.Counter()
        for name, module in model.named_modules():
            if type(module).__module__.startswith("peft.tuners") and hasattr(module, "lora_A"):
                kinds[(re.sub(r"\.\d+\.", ".N.", name), type(module).__name__)] += 1
        print(f"{path}: {adapters} adapter parameters")
        for (name, kind), count in sorted(kinds.items()):
            print(f"  {count} x {name} ({kind})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
