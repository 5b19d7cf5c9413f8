"""Reads a config.json (or the model directory holding one) without torch.

Kept apart from model_loading so export_graph.py can refuse a missing or broken
file before it imports torch, transformers and diffusers (several seconds).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

from errors import ExporterError


def read_config(path: Path) -> Dict[str, Any]:
    """The config as a dict, or an ExporterError naming the file and the problem."""
    if path.is_dir():
        path = path / "config.json"
    if not path.exists():
        raise ExporterError(f"{path}: no such file (expected a Hugging Face config.json or a "
                            f"model directory holding one)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ExporterError(f"{path}: cannot be read as UTF-8 text ({error})") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ExporterError(f"{path}: invalid JSON at line {error.lineno} column {error.colno}: "
                            f"{error.msg} (expected a config.json object)") from None
    if not isinstance(config, dict):
        raise ExporterError(f"{path}: expected a JSON object, found {type(config).__name__}")
    return config
