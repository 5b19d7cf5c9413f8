#!/usr/bin/env python3
"""Checks planner/'s rooms: every #include "planner/..." points to the same room or
one below it in ROOMS, no file sits outside a room, and the includes between
planner's files form no circle (a .h and its .cc count as one unit).

Usage: scripts/check_layers.py [SOURCE_DIR]. Prints each violation and exits 1;
prints a one-line summary and exits 0 when the tree is clean.
"""
import os
import re
import sys

# Lowest first; the order of planner/CMakeLists.txt's HEADROOM_PLANNER_ROOMS.
ROOMS = ["settings", "configs", "mechanisms", "memory", "time", "predict", "search"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"planner/([^"]+)"')


def planner_units(planner_dir):
    """{unit: [file paths]}, a unit being "room/name" for room/name.h and room/name.cc."""
    units, stray = {}, []
    for dirpath, _, files in os.walk(planner_dir):
        for name in files:
            if not name.endswith((".h", ".cc")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, planner_dir)
            if os.path.dirname(rel) not in ROOMS:
                stray.append(rel)
                continue
            units.setdefault(os.path.splitext(rel)[0], []).append(path)
    return units, stray


def include_edges(units):
    """{unit: {included unit}} for the includes of planner headers, and the errors found."""
    edges, errors = {}, []
    for unit, paths in units.items():
        room = ROOMS.index(unit.split("/")[0])
        edges[unit] = set()
        for path in paths:
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    match = INCLUDE.match(line)
                    if not match:
                        continue
                    target = os.path.splitext(match.group(1))[0]
                    target_room = target.split("/")[0]
                    if not os.path.isfile(os.path.join(os.path.dirname(os.path.dirname(path)), match.group(1))):
                        errors.append(f"{path}:{number}: includes planner/{match.group(1)}, not a file of a room")
                        continue
                    if ROOMS.index(target_room) > room:
                        errors.append(f"{path}:{number}: {unit.split('/')[0]}/ includes {target_room}/ above it "
                                      f"(planner/{match.group(1)})")
                    if target != unit:
                        edges[unit].add(target)
    return edges, errors


def circles(edges):
    """The strongly connected components of more than one unit (Tarjan, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def main():
    source_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    planner_dir = os.path.join(source_dir, "planner")
    units, stray = planner_units(planner_dir)
    edges, errors = include_edges(units)
    errors += [f"planner/{path}: outside the rooms ({', '.join(ROOMS)})" for path in stray]
    errors += ["include circle: " + " -> ".join(component) for component in circles(edges)]
    for error in errors:
        print(error)
    if errors:
        return 1
    print(f"planner/: {len(units)} units in {len(ROOMS)} rooms, "
          f"{sum(len(e) for e in edges.values())} includes, all pointing down, no circle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
