"""headroom's side of a recorded comparison again, with another build: the oracle's side is kept.

    python3 bench/oracle/repredict.py ROWS.json --headroom build/cli/headroom [--json-out OUT.json]

ROWS.json is what `compare.py --json-out` wrote. Each row's recorded command is run again with
the given binary, and the peak allocated is compared with the recorded oracle peak, so a planner
change can be checked against the grid in seconds instead of re-running the oracle (minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flags import refreshed_command  # noqa: E402
from report import read_rows  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def repredict(row: dict, headroom: str) -> dict:
    command = refreshed_command(row)
    command[0] = headroom
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    prediction = json.loads(done.stdout)["as_given"]["prediction"]
    b = prediction["allocated_breakdown"]  # as compare.py
    predicted = prediction["peak_allocated_bytes"] - b["workspaces_bytes"]  # as compare.py
    return {"name": row["name"], "oracle_bytes": row["oracle_bytes"], "predicted_bytes": predicted,
            "error_pct": 100.0 * (predicted - row["oracle_bytes"]) / row["oracle_bytes"],
            "predicted_gradients": b["gradients_bytes"], "oracle_gradients": row["oracle_at_peak"]["gradients"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows")
    parser.add_argument("--headroom", default=os.path.join(ROOT, "build", "cli", "headroom"))
    parser.add_argument("--json-out")
    args = parser.parse_args()
    rows = [r for r in read_rows(args.rows) if "error" not in r]
    out = [repredict(r, args.headroom) for r in rows]
    for r in out:
        print(f"{r['name']:60s} oracle {r['oracle_bytes'] / 2**30:8.2f} GiB  headroom "
              f"{r['predicted_bytes'] / 2**30:8.2f} GiB  {r['error_pct']:+6.1f}%")
    errors = [r["error_pct"] for r in out]
    if errors:
        print(json.dumps({"runs": len(out), "median_abs_pct": statistics.median(abs(e) for e in errors),
                          "within_2pct": sum(abs(e) <= 2 for e in errors),
                          "under_2pct": sum(e < -2 for e in errors)}))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
