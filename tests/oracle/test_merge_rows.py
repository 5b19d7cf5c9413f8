#!/usr/bin/env python3
"""merge_rows.py: rows replace by name, new names append, failed rows and clashes are refused."""
import gzip
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "bench", "oracle", "merge_rows.py")


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


def write(path, rows):
    with (gzip.open(path, "wt") if path.endswith(".gz") else open(path, "w")) as f:
        json.dump(rows, f)


def main():
    with tempfile.TemporaryDirectory() as d:
        grid, new, bad, clash = (os.path.join(d, n) for n in ("g.json.gz", "n.json", "b.json", "c.json"))
        write(grid, [{"name": "a", "oracle_bytes": 1}, {"name": "b", "oracle_bytes": 2}])
        write(new, [{"name": "b", "oracle_bytes": 20}, {"name": "c", "oracle_bytes": 3}])
        write(bad, [{"name": "a", "error": "boom"}])
        write(clash, [{"name": "c", "oracle_bytes": 30}])
        r = run(grid, new)
        assert r.returncode == 0, r.stderr
        rows = json.load(gzip.open(grid, "rt"))
        assert [(x["name"], x["oracle_bytes"]) for x in rows] == [("a", 1), ("b", 20), ("c", 3)], rows
        assert "1 rows replaced, 1 added, 3 in all" in r.stdout, r.stdout
        r = run(grid, bad)
        assert r.returncode != 0 and "b.json" in r.stderr and "'a' failed" in r.stderr, r.stderr
        r = run(grid, new, clash)
        assert r.returncode != 0 and "'c' is in both" in r.stderr, r.stderr
        assert json.load(gzip.open(grid, "rt")) == rows, "a refused merge changed the recorded rows"
    print("merge_rows: ok")


if __name__ == "__main__":
    main()
