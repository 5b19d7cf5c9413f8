"""fit and plan: headroom's planner on a settings dict or a config file.

Each call goes through the C++ binding (headroom._core) into the functions the
command line calls (cli/answers.h), so the dicts returned here are the JSON
documents `headroom fit --json` and `headroom plan --json` print
(docs/cli-json.md), value for value.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, Iterable, Mapping, Optional, Union

from . import _core

PathLike = Union[str, "os.PathLike[str]"]

# The config importers (docs/config-import.md), keyword -> the command line's flag.
_CONFIG_FLAGS = {
    "deepspeed": "--deepspeed",
    "torchtune": "--torchtune",
    "hf_args": "--hf-args",
    "accelerate": "--accelerate",
    "axolotl": "--axolotl",
    "llamafactory": "--llamafactory",
    "xtuner": "--xtuner",
    "mmengine": "--mmengine",
    "peft": "--peft",
    "calibration": "--calibration",
}

# The command line's exit statuses (cli/exit_status.h, docs/cli.md).
EXIT_FAILURE = 1
EXIT_USAGE = 2


class HeadroomError(Exception):
    """headroom refused: `message` is what `headroom` prints after "headroom: ",
    `exit_status` the status it exits with (2 wrong input, 1 headroom cannot or failed)."""

    def __init__(self, message: str, exit_status: int = EXIT_FAILURE):
        super().__init__(message)
        self.message = message
        self.exit_status = exit_status


class SettingsError(HeadroomError, ValueError):
    """A bad setting, flag or input file (a config, a model or measurement file):
    the command line's exit status 2."""


class HeadroomNote(UserWarning):
    """What an imported config assumed or did not read (the command line's
    "headroom: ..." lines on stderr)."""


def _raise(exit_status: int, message: str) -> None:
    if exit_status == EXIT_USAGE:
        raise SettingsError(message, exit_status)
    raise HeadroomError(message, exit_status)


def _text(what: str, value) -> str:
    """A path or word passed to the C++ readers. One holding a NUL would be cut
    there (a different file read than the one named; open() refuses it), and one
    that is not UTF-8 cannot cross: both are SettingsError naming `what`."""
    text = os.fspath(value)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if "\0" in text:
        raise SettingsError(f"{what}: {text!r}: holds a NUL character (expected a name without one)", EXIT_USAGE)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise SettingsError(f"{what}: {text!r}: not UTF-8 text (expected a UTF-8 name)", EXIT_USAGE) from None
    return text


def _request(model, settings, configs: Mapping[str, Any], torchtune_set: Iterable[str]):
    model_text = "" if model is None else _text("MODEL", model)
    settings_text, settings_file = "", ""
    if settings is None:
        pass
    elif isinstance(settings, Mapping):
        try:
            settings_text = json.dumps(dict(settings), allow_nan=False)
        except (TypeError, ValueError) as error:
            raise SettingsError(f"settings: not JSON: {error} (expected a RunSettings object, see docs/cli-json.md)",
                                EXIT_USAGE) from None
        except RecursionError:
            # json.dumps gives up near Python's recursion limit (1000), far past the readers' 64 levels.
            raise SettingsError("settings: nested deeper than 64 levels, past what json.dumps can write "
                                "(expected a RunSettings object, see docs/cli-json.md)", EXIT_USAGE) from None
    elif isinstance(settings, (str, os.PathLike)):
        settings_file = _text("settings", settings)
    else:
        raise TypeError(f"settings: expected a dict or a RunSettings JSON file path, got {type(settings).__name__}")
    flags = []
    for key, value in configs.items():
        if value is not None:
            flags.append((_CONFIG_FLAGS[key], _text(_CONFIG_FLAGS[key], value)))
    if isinstance(torchtune_set, str):
        torchtune_set = [torchtune_set]
    for override in torchtune_set:
        flags.append(("--torchtune-set", _text("--torchtune-set", str(override))))
    return model_text, settings_text, settings_file, flags


def _answer(function, model, settings, configs, torchtune_set, notes, *extra):
    ok, exit_status, text, reply_notes = function(*_request(model, settings, configs, torchtune_set), *extra)
    if notes is not None:
        notes.extend(reply_notes)
    else:
        for note in reply_notes:
            warnings.warn(note, HeadroomNote, stacklevel=3)
    if not ok:
        _raise(exit_status, text)
    return json.loads(text)


def fit(model: Optional[PathLike] = None, settings: Union[Mapping[str, Any], PathLike, None] = None, *,
        deepspeed: Optional[PathLike] = None, torchtune: Optional[PathLike] = None,
        torchtune_set: Iterable[str] = (), hf_args: Optional[PathLike] = None,
        accelerate: Optional[PathLike] = None, axolotl: Optional[PathLike] = None,
        llamafactory: Optional[PathLike] = None, xtuner: Optional[PathLike] = None,
        mmengine: Optional[PathLike] = None, peft: Optional[PathLike] = None,
        calibration: Optional[PathLike] = None, notes: Optional[list] = None) -> dict:
    """Will this run fit? The document `headroom fit MODEL --json` prints.

    `settings` is a RunSettings dict (the keys of docs/cli-json.md, as in a plan
    file; bytes as integers) or the path of such a JSON file: `--settings`. The
    config files are read on top of it, in the command line's order, and MODEL
    (a zoo name, a Hugging Face config.json or model directory, a layer-graph
    file) overrides the model of both. The notes the command line prints on
    stderr are appended to `notes` when given, else issued as HeadroomNote
    warnings. Raises SettingsError or HeadroomError with the command line's message.
    """
    configs = dict(deepspeed=deepspeed, torchtune=torchtune, hf_args=hf_args, accelerate=accelerate,
                   axolotl=axolotl, llamafactory=llamafactory, xtuner=xtuner, mmengine=mmengine, peft=peft,
                   calibration=calibration)
    return _answer(_core.fit, model, settings, configs, torchtune_set, notes)


def plan(model: Optional[PathLike] = None, settings: Union[Mapping[str, Any], PathLike, None] = None, *,
         deepspeed: Optional[PathLike] = None, torchtune: Optional[PathLike] = None,
         torchtune_set: Iterable[str] = (), hf_args: Optional[PathLike] = None,
         accelerate: Optional[PathLike] = None, axolotl: Optional[PathLike] = None,
         llamafactory: Optional[PathLike] = None, xtuner: Optional[PathLike] = None,
         mmengine: Optional[PathLike] = None, peft: Optional[PathLike] = None,
         calibration: Optional[PathLike] = None, emit: Iterable[str] = (),
         notes: Optional[list] = None) -> dict:
    """The fastest plan that fits: the document `headroom plan MODEL --json`
    prints (without -o, so "output_file" is None). Arguments as for fit().

    `emit`: `--emit` requests, "KIND" or "KIND=FILE" (deepspeed, accelerate,
    torch, or the config the run was read from written back: torchtune, hf-args,
    axolotl, llamafactory, xtuner, mmengine, accelerate). The document's
    "exports" maps each kind to its text, or to the FILE written (atomically,
    after every request was built); "notes" says what they cannot express."""
    configs = dict(deepspeed=deepspeed, torchtune=torchtune, hf_args=hf_args, accelerate=accelerate,
                   axolotl=axolotl, llamafactory=llamafactory, xtuner=xtuner, mmengine=mmengine, peft=peft,
                   calibration=calibration)
    if isinstance(emit, str):
        emit = [emit]
    return _answer(_core.plan, model, settings, configs, torchtune_set, notes,
                   [_text("--emit", str(request)) for request in emit])


def read_measurement(path: PathLike) -> dict:
    """A measurement file as `headroom report --measurement` reads it (docs/report.md):
    the fields it understood, or SettingsError with its message."""
    ok, exit_status, text, _ = _core.read_measurement(_text("--measurement", path))
    if not ok:
        _raise(exit_status, text)
    return json.loads(text)
