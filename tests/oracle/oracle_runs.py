"""What the oracle's tiny tests share: running the oracle on a list of specs, and
reporting headroom's figure beside each run's peak (stderr; the bytes are the
tests' own assertions)."""

import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "oracle"))


def run_oracle(python, specs):
    """run_oracle.py on `specs` in one process under `python`; its stderr tail on failure.
    From the repository root: a spec's model path is relative to it (CTest runs in build/)."""
    done = subprocess.run([python, os.path.join(ROOT, "bench", "oracle", "run_oracle.py"), "-"],
                          input=json.dumps(specs), capture_output=True, text=True, timeout=900, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout)


def report_headroom_figures(test, results, headroom):
    """headroom's `fit` of every run answers, and its peak is printed beside the oracle's."""
    from compare import predict
    for name, result in results.items():
        guess = predict(dict(result["spec"], **result["resolved"]), headroom)
        test.assertNotIn("error", guess, name)
        error = 100.0 * (guess["peak_allocated_bytes"] / result["peak_allocated_bytes"] - 1)
        print(f"{name}: oracle {result['peak_allocated_bytes']} headroom "
              f"{guess['peak_allocated_bytes']} ({error:+.1f}%)", file=sys.stderr)
