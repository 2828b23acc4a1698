#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A traced run of the main example: SHARDEX_TRACE=run.json megatron_mlp on
3 ranks, --steps 4. The file must be valid Chrome trace JSON with one process
per rank, and hold every collective on the 3-rank communicator: per step an
all_reduce forward (P -> I) and one backward (replicate's adjoint), plus the
three all_gathers of the last step's gradients. scripts/trace_summary.py must
count each rank's collectives as the trace holds them, and its self times
add up to the time the rank's spans cover. Then scripts/plot_trace.py draws it (SKIP, exit 77, where matplotlib is
not installed).

    check_trace.py EXAMPLE PLOT_SCRIPT SUMMARY_SCRIPT MPIRUN [MPIRUN_ARGS...]
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plotting  # noqa: E402  (beside this file)
from collections import Counter


def run_summary(summary, path):
    """trace_summary.py's table of a trace: (None, {rank: (ms covered, {(category, name): (self ms, count)})}),
    or (what went wrong, None)."""
    out = subprocess.run([sys.executable, summary, "--top", "1000", path], capture_output=True, text=True)
    if out.returncode != 0:
        return f"trace_summary.py exited {out.returncode}: {out.stderr.strip()}", None
    ranks, rows = {}, None
    for line in out.stdout.splitlines():
        if line.startswith("rank "):
            rows = {}
            ranks[int(line.split()[1].rstrip(":"))] = (float(line.split()[2]), rows)
        elif line.strip():
            _share, _pct, ms, _unit, count, cat, name = line.split(None, 6)
            rows[(cat, name)] = (float(ms), int(count))
    return None, ranks


def summary_problems(summary, path, events, ranks):
    """What is wrong with trace_summary.py's table of the run: each rank's count of each collective
    (against the trace's own), self times that add up to the time its spans cover."""
    error, tables = run_summary(summary, path)
    if error:
        return [error]
    if sorted(tables) != list(range(ranks)):
        return [f"trace_summary.py listed ranks {sorted(tables)}, expected 0..{ranks - 1}"]
    problems = []
    for r, (covered, table) in tables.items():
        want = Counter(e["name"] for e in events if e["pid"] == r and e["cat"] == "collective")
        got = Counter({name: n for (cat, name), (_, n) in table.items() if cat == "collective"})
        if got != want or not want:
            problems.append(f"trace_summary.py rank {r}: collectives {dict(got)}, the trace's {dict(want)}")
        total = sum(ms for ms, _ in table.values())
        if abs(total - covered) > 0.01 * covered + 0.1:
            problems.append(f"trace_summary.py rank {r}: self times add up to {total:.2f} ms, not {covered:.2f}")
    return problems


def synthetic_problems(summary, tmp):
    """trace_summary.py on a hand-made trace whose self times are known: a child inside its parent
    (written before it, as spans are), a child that ends a microsecond after its parent followed by
    a span from the parent's end, and two spans alike (the later in the file outside)."""
    spans = [("child", 2000, 3000), ("parent", 0, 10000), ("late child", 25000, 5001), ("parent 2", 20000, 10000),
             ("next", 30000, 10000), ("inner", 50000, 10000), ("outer", 50000, 10000)]
    path = os.path.join(tmp, "synthetic.json")
    with open(path, "w") as f:
        json.dump({"traceEvents": [{"name": n, "cat": "eval", "ph": "X", "pid": 0, "tid": 0, "ts": t, "dur": d}
                                   for n, t, d in spans]}, f)
    error, tables = run_summary(summary, path)
    if error:
        return [error]
    want = {"child": 3.0, "parent": 7.0, "late child": 5.0, "parent 2": 5.0, "next": 10.0, "inner": 10.0, "outer": 0.0}
    covered, table = tables.get(0, (None, {}))
    got = {name: ms for (_, name), (ms, _) in table.items()}
    if got != want or covered != 40.0:
        return [f"trace_summary.py on a hand-made trace: self times {got}, {covered} ms covered; expected {want}, 40.0"]
    return []


def main():
    exe, plot, summary, mpirun, mpirun_args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
    ranks, steps = 3, 4
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.json")
        env = dict(os.environ, SHARDEX_TRACE=path)
        subprocess.run([mpirun] + mpirun_args + ["-n", str(ranks), exe, "--steps", str(steps), "--speeds", "1,2,3"],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        trace = json.load(open(path))
        events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
        names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
        problems = []
        if names != {r: f"rank {r}" for r in range(ranks)}:
            problems.append(f"processes {names}, not one per rank")
        world = f"a communicator of {ranks} ranks"
        for r in range(ranks):
            mine = [e for e in events if e["pid"] == r and e["cat"] == "collective" and world in e["args"].get("communicator", "")]
            got = Counter(e["name"] for e in mine)
            want = Counter({"all_reduce": 2 * steps, "all_gather": 3})
            if got != want:
                problems.append(f"rank {r}: collectives {dict(got)}, expected {dict(want)}")
            for e in mine:
                for k in ("from", "to", "strategy", "bytes_in", "bytes_out", "communicator"):
                    if k not in e["args"]:
                        problems.append(f"rank {r}: {e['name']} has no {k}")
                        break
        if any(e["dur"] < 0 or e["ts"] < 0 for e in events):
            problems.append("negative times")
        problems += summary_problems(summary, path, events, ranks) + synthetic_problems(summary, tmp)
        return plotting.verdict_then_draw(
            "trace", problems,
            f"{len(events)} events, {ranks} ranks, {2 * steps + 3} collectives per rank on the world communicator", plot, path, tmp)


if __name__ == "__main__":
    sys.exit(main())
