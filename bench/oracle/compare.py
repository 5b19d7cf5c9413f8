"""The oracle's runs beside headroom's prediction of the same runs.

    python3 bench/oracle/compare.py GRID.json [--python ENV/bin/python]
        [--headroom build/cli/headroom] [--out docs/results/oracle.md] [--jobs N] [--batch N]

For every run of the grid: the oracle's peak of allocated bytes and each category
at the peak (run_oracle.py, under the stack's pinned environment), headroom's
`fit --json` for the same run given as a user would (`--stack`, flags), and a
diff of the tensors live at the peak. Prints the table and the summary the
ground-truth issue sets as its target (within 2% on 95% of the runs, never
under by more than 2%, each category within 3%).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from flags import config_text, headroom_flags, model_path, refreshed_command  # noqa: E402
from grid import expand_grid  # noqa: E402
from report import CATEGORIES, read_rows, write_atomically, write_report  # noqa: E402

GIB = 2 ** 30


def oracle_batch(specs: list, python: str) -> list:
    """One oracle process for several runs (run_oracle.py takes a list)."""
    specs = [dict(s, model=model_path(s)) for s in specs]  # the repository's paths, from any cwd
    done = subprocess.run([python, os.path.join(HERE, "run_oracle.py"), "-"], input=json.dumps(specs),
                          capture_output=True, text=True, timeout=600 + 300 * len(specs))
    if done.returncode != 0:
        error = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
        return [{"error": error} for _ in specs]
    return json.loads(done.stdout)


def predict(spec: dict, headroom: str) -> dict:
    return predict_command([headroom, "fit", *headroom_flags(spec), "--json"])


def predict_command(command: list) -> dict:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    if done.returncode not in (0, 1):
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed",
                "command": command}
    prediction = json.loads(done.stdout)["as_given"]["prediction"]
    # the breakdown of peak_allocated_bytes itself (allocated accounting, the allocated
    # walk's peak): the oracle counts tensors' bytes, not the segments that reserve them
    b = prediction["allocated_breakdown"]
    # cuBLAS/cuDNN workspaces are allocated through the caching allocator on a GPU,
    # but no library kernel runs on meta: the oracle sees tensors only, so the
    # comparison leaves them out (docs/results/oracle.md says so).
    # The oracle marks module.parameters() as parameters and leaves what else the model
    # holds (module buffers, bitsandbytes' QuantState) with its transients, or its saved
    # activations where autograd keeps a view of it (meta_recorder.py `adopt_model`):
    # headroom's, among its parameters, go there too.
    buffers, saved = b["buffers_bytes"], b["saved_buffers_bytes"]
    return {"command": command,
            "peak_allocated_bytes": prediction["peak_allocated_bytes"] - b["workspaces_bytes"],
            # the allocator simulation's peak (`headroom simulate`), workspaces left out the same way
            "simulated_peak_allocated_bytes": prediction["simulated_peak_allocated_bytes"] - b["workspaces_bytes"],
            # its largest sum of live tensors, without the blocks' unsplit tails: what the walk counts
            "simulated_peak_live_bytes": prediction["simulated_peak_live_bytes"] - b["workspaces_bytes"],
            "at_peak": {
                "parameters": b["parameters_bytes"] + b["master_weights_bytes"] - buffers,
                "gradients": b["gradients_bytes"],
                "optimizer_states": b["optimizer_states_bytes"] + b["paged_optimizer_states_bytes"],
                "activations": b["activations_bytes"] + saved,
                "transient": b["transient_bytes"] + b["zero_buffers_bytes"] + buffers - saved},
            "peak_at": prediction.get("peak_at", {})}


def oracle_categories(result: dict) -> dict:
    """The oracle's categories as headroom's breakdown names them: FSDP's gathered
    parameters are transient as headroom's (its ZeRO buffers, `predict_command`)."""
    p = result["at_peak"]
    return {"parameters": p["parameters"], "gradients": p["gradients"],
            # bitsandbytes' paged states (unified memory, outside the peak) as headroom's
            # `paged_optimizer_states_bytes`, which predict_command adds to its states
            "optimizer_states": p["optimizer_states"] + result.get("paged_optimizer_states_bytes", 0),
            "activations": p["saved_activations"] + p["inputs"],
            "transient": p["transient"] + p.get("gathered", 0)}


def compare_batch(specs: list, python: str, headroom: str) -> list:
    started = time.time()
    truths = oracle_batch(specs, python)
    seconds = (time.time() - started) / len(specs)
    return [compare_one(spec, truth, seconds, headroom) for spec, truth in zip(specs, truths)]


def compare_one(spec: dict, truth: dict, seconds: float, headroom: str) -> dict:
    # what the stack's release chose where the spec left it open (the Trainer's optim)
    # and the releases it ran, as a user who knows them gives them
    guess = predict(dict(spec, **truth.get("resolved", {}), versions=truth.get("versions", {})), headroom)
    row = {"name": spec["name"], "spec": spec, "oracle_seconds": round(seconds, 1)}
    if "error" in truth or "error" in guess:
        row["error"] = truth.get("error") or guess.get("error")
        return row
    row["oracle_bytes"] = truth["peak_allocated_bytes"]
    row["predicted_bytes"] = guess["peak_allocated_bytes"]
    row["error_pct"] = 100.0 * (row["predicted_bytes"] - row["oracle_bytes"]) / row["oracle_bytes"]
    row["oracle_at_peak"] = oracle_categories(truth)
    row["predicted_at_peak"] = guess["at_peak"]
    row["oracle_phase"] = truth["peak_phase"]
    row["predicted_at"] = guess["peak_at"]
    row["live_at_peak"] = truth["live_at_peak"][:12]
    row["versions"] = truth["versions"]
    row["command"] = " ".join(os.path.relpath(a, ROOT) if a.startswith(ROOT) else a
                              for a in guess["command"])
    if config_text(spec) is not None:
        row["config_text"] = config_text(spec)  # the file the command names, for the reader
    return row


def restore_config_file(command: list, text) -> None:
    """The config file a recorded command names (a DeepSpeed JSON, a torchtune YAML) lives
    in the temporary folder of the machine that recorded it: write it again from the row."""
    if text is None:
        return
    for arg in command:
        if os.path.dirname(arg) == os.path.join(tempfile.gettempdir(), "headroom-oracle") and not os.path.exists(arg):
            os.makedirs(os.path.dirname(arg), exist_ok=True)
            with open(arg, "w") as f:
                f.write(text)


def rerun_recorded(row: dict, headroom: str) -> dict:
    """A recorded row with headroom's side predicted again by `headroom` (its oracle side kept)."""
    if "error" in row:
        return row
    command = refreshed_command(row)
    restore_config_file(command, row.get("config_text"))
    guess = predict_command([headroom, *command[1:]])
    if "error" in guess:
        return dict(row, error=guess["error"])
    return dict(row, predicted_bytes=guess["peak_allocated_bytes"], predicted_at_peak=guess["at_peak"],
                predicted_at=guess["peak_at"],
                error_pct=100.0 * (guess["peak_allocated_bytes"] - row["oracle_bytes"]) / row["oracle_bytes"])


CATEGORY_FLOOR = 2 ** 20  # a category of a few bytes agrees within 1 MiB


def category_agrees(row: dict, category: str) -> bool:
    """The issue's check: each category at the peak within 3% of the oracle's."""
    truth, guess = row["oracle_at_peak"][category], row["predicted_at_peak"][category]
    return abs(guess - truth) <= max(0.03 * truth, CATEGORY_FLOOR)


def summary(rows: list) -> dict:
    ok = [r for r in rows if "error" not in r]
    errors = [r["error_pct"] for r in ok]
    if not errors:
        return {"runs": len(rows), "failed": len(rows)}
    return {"runs": len(rows), "failed": len(rows) - len(ok),
            "median_abs_pct": statistics.median(abs(e) for e in errors),
            "within_2pct": sum(abs(e) <= 2 for e in errors), "under_2pct": sum(e < -2 for e in errors),
            "worst_under_pct": min(errors), "worst_over_pct": max(errors),
            "categories_within_3pct": {c: sum(category_agrees(r, c) for r in ok) for c in CATEGORIES},
            "all_categories_within_3pct": sum(all(category_agrees(r, c) for c in CATEGORIES) for r in ok)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("grid")
    parser.add_argument("--python", help="the oracle's interpreter for every run (default: each run's "
                        "`env`, .venv-oracle/ENV/bin/python, hf5 when the run names none)")
    parser.add_argument("--headroom", default=os.path.join(ROOT, "build", "cli", "headroom"))
    parser.add_argument("--out", help="write the table as Markdown here")
    parser.add_argument("--json-out", help="write every row as JSON here")
    parser.add_argument("--jobs", type=int, default=1, help="oracle processes at once")
    parser.add_argument("--batch", type=int, default=8, help="runs per oracle process")
    parser.add_argument("--only", help="run only grid entries whose name contains this")
    parser.add_argument("--recorded", help="the oracle's side from this --json-out of an earlier run of the "
                        "same grid (same environments): only headroom's side runs again")
    args = parser.parse_args()
    specs = [s for s in expand_grid(args.grid) if not args.only or args.only in s["name"]]
    started = time.time()
    if args.recorded:
        recorded = {r["name"]: r for r in read_rows(args.recorded)}
        rows = [rerun_recorded(recorded[s["name"]], args.headroom) if s["name"] in recorded
                else {"name": s["name"], "spec": s, "error": "not in the recorded runs"} for s in specs]
        return finish(rows, time.time() - started, args)
    batches = []
    for env in dict.fromkeys(s.get("env", "hf5") for s in specs):
        of_env = [s for s in specs if s.get("env", "hf5") == env]
        python = args.python or os.path.join(ROOT, ".venv-oracle", env, "bin", "python")
        batches += [(of_env[i:i + args.batch], python) for i in range(0, len(of_env), args.batch)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        done = pool.map(lambda b: compare_batch(b[0], b[1], args.headroom), batches)
        rows = [row for batch in done for row in batch]
    return finish(rows, time.time() - started, args)


def finish(rows: list, wall: float, args: argparse.Namespace) -> int:
    """Prints each row and the summary, and writes the table and the rows."""
    for r in rows:
        if "error" in r:
            print(f"{r['name']:60s} ERROR {r['error']}")
        else:
            print(f"{r['name']:60s} oracle {r['oracle_bytes'] / GIB:8.2f} GiB  headroom "
                  f"{r['predicted_bytes'] / GIB:8.2f} GiB  {r['error_pct']:+6.1f}%")
    totals = summary(rows)
    totals["wall_seconds"] = round(wall, 1)
    print(json.dumps(totals))
    if args.recorded:
        totals["oracle_recorded"] = os.path.basename(args.recorded)
    if args.out:
        write_report(args.out, rows, totals, args.grid)
    if args.json_out:
        write_atomically(args.json_out, json.dumps(rows, indent=1))
    return 0 if totals.get("failed", 1) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
