#!/usr/bin/env python3
"""Reads an MMEngine / XTuner Python config with MMEngine's own loader and prints it as JSON.

    .venv/bin/python scripts/exporter/read_mmengine_config.py CONFIG.py [--cfg-options KEY=VALUE ...]

An MMEngine config is Python code. It is read here by mmengine.config.Config.fromfile,
exactly as `xtuner train` and MMEngine's Runner read it, never parsed by guessing. A
config that imports other packages (XTuner's: transformers, peft, torch, xtuner) is
loaded in MMEngine's lazy-import mode: each import becomes a LazyObject naming its
module, so neither xtuner nor the model code has to be installed. `--cfg-options`
merges KEY=VALUE overrides as `xtuner train --cfg-options` does (DictAction).

Printed: {"format": "headroom.mmengine-config", "version": 1, "file": ..., "mmengine":
..., "config": {...}, "files_read": [...]}, where files_read lists the other files read while
the config loaded (its _base_ files, whatever its code opened), and where an imported object is {"import": "module.Name"} (torch
dtypes included: {"import": "torch.float16"}), tuples are lists, and any other object
is {"repr": "..."}. headroom --xtuner and --mmengine read this (planner/configs/mmengine_import.h).

Exit status: 0 printed; 2 bad input (one message naming the file; a config that calls
sys.exit(N) is that too, and says N); 3 mmengine is not installed (scripts/setup_exporter.sh),
with a message saying so: an exit status with no message is the config's own (os._exit(N)).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any


def _import_name(obj: Any) -> str:
    """Dotted name of a LazyObject or LazyAttr (mmengine/config/lazy.py)."""
    from mmengine.config.lazy import LazyAttr, LazyObject

    if isinstance(obj, LazyAttr):
        return f"{_import_name(obj.source)}.{obj.name}"
    if isinstance(obj, LazyObject):
        module = obj._module
        if isinstance(module, list):  # `import torch`: the module itself
            module = module[0] if len(module) == 1 else ",".join(module)
        return module if obj._imported is None else f"{module}.{obj._imported}"
    raise TypeError(type(obj))


def _plain(value: Any) -> Any:
    from mmengine.config.lazy import LazyAttr, LazyObject

    if isinstance(value, (LazyObject, LazyAttr)):
        return {"import": _import_name(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"repr": repr(value)}
    module = getattr(value, "__module__", None)
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if module and name:  # a class or function imported in a non-lazy config
        return {"import": f"{module}.{name}"}
    text = repr(value)
    if text.startswith("torch."):  # torch.float16 in a non-lazy config
        return {"import": text}
    return {"repr": text}


class _FilesRead:
    """The files Python opens for reading while the config loads (an audit hook, PEP 578): its
    _base_ files, and whatever its own code reads. headroom never writes an output over one."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.recording = False
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple) -> None:
        if not self.recording or event != "open" or len(args) < 2:
            return
        path, mode = args[0], args[1]
        if isinstance(path, (str, bytes, os.PathLike)) and isinstance(mode, str) and "r" in mode and "+" not in mode:
            self.paths.append(os.fsdecode(path))

    def report(self, config: Path) -> list[str]:
        """Each file once, resolved; not the config itself, not Python's own (its prefixes), not
        the temporary copies MMEngine has removed again."""
        python = {os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
        own = os.path.realpath(config)
        files = set()
        for path in self.paths:
            real = os.path.realpath(path)
            if real != own and os.path.isfile(real) and not any(real.startswith(p) for p in python):
                files.add(real)
        return sorted(files)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="an MMEngine / XTuner config (.py)")
    parser.add_argument("--cfg-options", nargs="+", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    path = Path(args.config)
    if not path.is_file():
        print(f"{path}: no such file (expected an MMEngine / XTuner config .py)", file=sys.stderr)
        return 2
    try:
        import mmengine
        from mmengine.config import Config, DictAction
    except ImportError as error:
        print(f"{path}: reading an MMEngine config needs mmengine ({error}): run scripts/setup_exporter.sh",
              file=sys.stderr)
        return 3
    files_read = _FilesRead()
    files_read.recording = True
    try:
        cfg = Config.fromfile(str(path))
        if args.cfg_options:
            overrides = argparse.Namespace()
            DictAction(option_strings=["--cfg-options"], dest="options")(None, overrides, args.cfg_options)
            cfg.merge_from_dict(overrides.options)
        raw = cfg._to_lazy_dict() if hasattr(cfg, "_to_lazy_dict") else cfg.to_dict()
        files_read.recording = False
    except SystemExit as error:  # the config's own sys.exit(N), not this loader's status
        print(f"{path}: the config exited with status {error.code} (sys.exit) while MMEngine loaded it",
              file=sys.stderr)
        return 2
    except Exception as error:  # the config is user code: any failure is bad input
        print(f"{path}: MMEngine could not load it: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    out = {
        "format": "headroom.mmengine-config",
        "version": 1,
        "file": str(path),
        "mmengine": mmengine.__version__,
        "config": _plain(raw),
        "files_read": files_read.report(path),
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
