"""headroom: will this fine-tuning run fit on this GPU?

    import headroom
    answer = headroom.fit("llama-3-8b", {"gpu": "4090", "mode": "qlora", "seq_len": 2048})
    answer["fits"], answer["as_given"]["prediction"]["gpu_total_bytes"]
    best = headroom.plan(settings="settings.json", hf_args="training_args.json")["best"]

fit() and plan() return the documents `headroom fit --json` and `headroom plan
--json` print (docs/cli-json.md), computed by the same C++. check(), watch() and
headroom.integrations.transformers.HeadroomCallback predict a live run before its
first step and measure it (they need torch). docs/python.md.
"""

from ._api import (EXIT_FAILURE, EXIT_USAGE, HeadroomError, HeadroomNote, SettingsError, fit, plan,
                   read_measurement)
from ._core import __version__
from ._training import DoesNotFitError, Watch, check, watch, write_json_atomic

__all__ = [
    "EXIT_FAILURE", "EXIT_USAGE", "DoesNotFitError", "HeadroomError", "HeadroomNote", "SettingsError", "Watch",
    "__version__", "check", "fit", "plan", "read_measurement", "watch", "write_json_atomic",
]
