"""HeadroomCallback: a transformers TrainerCallback that predicts the run at the
start of training, stops it before the first step when it does not fit, and at
the end writes predicted vs measured memory (docs/python.md).

    from headroom.integrations.transformers import HeadroomCallback
    trainer = Trainer(model, args, train_dataset=data, callbacks=[HeadroomCallback(seq_len=2048)])
    trainer.train()  # DoesNotFitError before step 1 when it cannot fit

Stopping is an exception: transformers checks control.should_training_stop only
after a step has run (Trainer._run_epoch), so setting it in on_train_begin would
still run one step, the step that runs out of memory.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any, Mapping, Optional

from transformers import TrainerCallback

from .._training import Watch

logger = logging.getLogger("headroom")


class HeadroomCallback(TrainerCallback):
    """Checks a Trainer run before step 1 and measures it.

    gpu, gpu_memory_bytes: the GPU and budget to predict for; by default the
        CUDA device's name and memory. On the CPU gpu is required.
    seq_len: tokens per sample; required unless the arguments are an SFTConfig
        with max_length.
    settings: further RunSettings keys (docs/cli-json.md), e.g. {"stack": "hf-trainer"}.
    out_dir: where the files go; default <args.output_dir>/headroom.
    refuse_tight: also stop when the prediction's band straddles the budget.
    configs: deepspeed=, accelerate=, calibration= paths, as for headroom.fit().

    After training, out_dir holds plan.json (the prediction) and measurement.json:
    `headroom report out_dir/plan.json -o report.html --measurement out_dir/measurement.json`.
    """

    def __init__(self, gpu: Optional[str] = None, gpu_memory_bytes: Optional[int] = None,
                 seq_len: Optional[int] = None, settings: Optional[Mapping[str, Any]] = None,
                 out_dir: Optional[str] = None, refuse_tight: bool = False, **configs):
        self.gpu = gpu
        self.gpu_memory_bytes = gpu_memory_bytes
        self.seq_len = seq_len
        self.settings = dict(settings or {})
        self.out_dir = out_dir
        self.refuse_tight = refuse_tight
        self.configs = configs
        self.watch: Optional[Watch] = None
        self.notes: list = []

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        seq_len = self.seq_len
        if seq_len is None and "seq_len" not in self.settings:
            seq_len = getattr(args, "max_length", None) or getattr(args, "max_seq_length", None)
        out_dir = self.out_dir or os.path.join(args.output_dir, "headroom")
        if args.process_index > 0:  # every rank checks and measures itself; rank 0 writes into out_dir
            out_dir = os.path.join(out_dir, f"rank{args.process_index}")
        self.watch = Watch(model, self.settings, optimizer=optimizer, out_dir=out_dir,
                           gpu=self.gpu, gpu_memory_bytes=self.gpu_memory_bytes, seq_len=seq_len,
                           training_args=args, refuse_tight=self.refuse_tight, notes=self.notes,
                           **self.configs)
        answer = self.watch.check()  # raises DoesNotFitError: training stops before step 1
        for note in self.notes:
            logger.info("headroom: %s", note)
        logger.info("headroom: %s", answer["verdict"])

    def on_step_begin(self, args, state, control, **kwargs):
        if self.watch is not None:
            self.watch.step_begin()

    def on_step_end(self, args, state, control, optimizer=None, **kwargs):
        if self.watch is None:
            return
        if optimizer is not None:
            self.watch.optimizer = optimizer
        self.watch.step_end(state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        # The Trainer logs the mean loss since the last log; it belongs to the last step measured.
        if self.watch is not None and self.watch.steps and logs and "loss" in logs:
            loss = logs["loss"]
            if isinstance(loss, (int, float)) and math.isfinite(loss):
                self.watch.steps[-1]["loss"] = float(loss)

    def on_train_end(self, args, state, control, **kwargs):
        if self.watch is None:
            return
        path = self.watch.write()
        if path is not None:
            logger.info("headroom: predicted vs measured written to %s", path)
