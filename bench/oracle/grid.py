"""The oracle grid: a JSON file of axes, expanded to runs.

    {"base": {...keys every run shares...},
     "groups": [{"axes": {"model": [...], "batch_seq": [[1, 512], [2, 2048]], ...},
                 "set": {...keys this group fixes...}, "tag": "in-backward"}]}

Every group is the cartesian product of its axes over `base` and `set`;
`batch_seq` sets `batch` and `seq` together; `grpo_shape` sets `batch`, `prompt`, `completion`
and `num_generations` together (stacks/trl_grpo.py); `seq_target` sets `seq` and `target_seq`
(an encoder-decoder's two lengths, stacks/hf_tasks.py seq2seq_batch). Each run gets a name from the
values that vary, and the group's `tag` (what its `set` changes) when it has one.
"""

from __future__ import annotations

import itertools
import json
import os


def _name(run: dict, varied: list) -> str:
    parts = []
    for key in varied:
        if key == "grpo_shape":
            value = f"b{run['batch']}p{run['prompt']}c{run['completion']}g{run['num_generations']}"
        elif key == "seq_target":
            value = f"s{run['seq']}t{run['target_seq']}"
        else:
            value = run[key] if key != "batch_seq" else f"b{run['batch']}s{run['seq']}"
        if key == "model":
            value = os.path.basename(str(value).rstrip("/"))
        if isinstance(value, list):
            value = "+".join(map(str, value))
        parts.append(str(value))
    return "/".join(parts)


def expand_grid(path: str) -> list:
    with open(path) as f:
        grid = json.load(f)
    runs = []
    for group in grid["groups"]:
        axes = group["axes"]
        keys = list(axes)
        for values in itertools.product(*(axes[k] for k in keys)):
            run = dict(grid.get("base", {}), **group.get("set", {}))
            for key, value in zip(keys, values):
                if key == "batch_seq":
                    run["batch"], run["seq"] = value
                elif key == "seq_target":
                    run["seq"], run["target_seq"] = value
                elif key == "grpo_shape":
                    run["batch"], run["prompt"], run["completion"], run["num_generations"] = value
                else:
                    run[key] = value
            env = f"[{run['env']}]" if "env" in run else ""
            rest = [k for k in keys if k not in ("model", "method")]
            tag = f"/{group['tag']}" if "tag" in group else ""
            run["name"] = run["stack"] + env + "/" + _name(run, ["model", "method"] + rest) + tag
            runs.append(run)
    return runs
