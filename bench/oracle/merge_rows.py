#!/usr/bin/env python3
"""Merges re-recorded oracle rows into the recorded grid by run name.

  python3 bench/oracle/merge_rows.py bench/oracle/recorded/grid-rows.json.gz NEW.json [NEW2.json ...]

Each NEW file is a compare.py --json-out of a subset of the grid (`--only`). A row of the same
name replaces the recorded one in place; a new name is appended. A row that carries an "error"
is refused (a failed run must not replace evidence), naming the file and the run. The recorded
file is rewritten atomically, so a failure leaves it as it was. Two helpers that re-record
different stacks each keep their own NEW file; merging both is order-free unless they share a name,
which is refused too.
"""
import gzip
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import read_rows  # noqa: E402


def fresh_rows(paths: list) -> dict:
    """Name -> row from every NEW file; refuses failed rows and names given twice."""
    fresh, source = {}, {}
    for path in paths:
        for row in read_rows(path):
            name = row.get("name")
            if not name:
                sys.exit(f"merge_rows: {path}: a row has no 'name' (expected compare.py --json-out rows)")
            if "error" in row:
                sys.exit(f"merge_rows: {path}: run '{name}' failed ({row['error']}); not merged")
            if name in fresh:
                sys.exit(f"merge_rows: run '{name}' is in both {source[name]} and {path}")
            fresh[name], source[name] = row, path
    return fresh


def merged(recorded: list, fresh: dict) -> tuple:
    """The recorded rows with fresh ones in place by name, new names appended; counts."""
    names = {r["name"] for r in recorded}
    rows = [fresh.get(r["name"], r) for r in recorded]
    added = [row for name, row in fresh.items() if name not in names]
    return rows + added, len(fresh) - len(added), len(added)


def write_gz_atomically(path: str, rows: list) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile(dir=folder, delete=False, suffix=".tmp") as f:
        tmp = f.name
    with gzip.open(tmp, "wt") as out:
        json.dump(rows, out, indent=1)
    os.replace(tmp, path)


def main(argv: list) -> int:
    if len(argv) < 3:
        sys.exit(__doc__.strip().splitlines()[2].strip())
    recorded_path, new_paths = argv[1], argv[2:]
    rows, replaced, added = merged(read_rows(recorded_path), fresh_rows(new_paths))
    write_gz_atomically(recorded_path, rows)
    print(f"merge_rows: {recorded_path}: {replaced} rows replaced, {added} added, {len(rows)} in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
