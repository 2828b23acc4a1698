#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where a traced run's time went: a table per rank of a shardex trace
(SHARDEX_TRACE=run.json), its spans grouped by category and name.

usage: scripts/trace_summary.py [--top N] [--rank R] TRACE.json

Spans nest (an evaluated expression holds the transitions it ran, the
backward pass its steps), so each span is credited with its self time: its
duration less its direct children's. The self times of a rank add up to the
time its outermost spans cover. Each line: the share of that time, the self
milliseconds, the count of spans, the category and the name. The standard
library only (no matplotlib: it runs on a bare GPU machine). On a GPU, run the
program with CUDA_LAUNCH_BLOCKING=1 so that each span holds its kernels.
"""
import argparse
import json
import sys
from collections import defaultdict


def self_times(events):
    """{(category, name): [self microseconds, count]} of one rank's spans, and the time its outermost spans cover."""
    totals = defaultdict(lambda: [0.0, 0])
    covered = 0.0
    by_thread = defaultdict(list)

    def close(frame):  # [end, key, children's time, duration]
        totals[frame[1]][0] += max(frame[3] - frame[2], 0.0)

    for i, e in enumerate(events):
        by_thread[e.get("tid", 0)].append((i, e))
    for spans in by_thread.values():
        # Parents first: by start, the longer of two at one start outside, and of two alike the
        # later in the file (a span is written when it closes, so a parent after its children).
        spans.sort(key=lambda ie: (ie[1]["ts"], -ie[1]["dur"], -ie[0]))
        stack = []  # frames as close() takes them
        for _, e in spans:
            while stack and e["ts"] >= stack[-1][0]:
                close(stack.pop())
            key = (e.get("cat", "?"), e["name"])
            totals[key][1] += 1
            start, end = e["ts"], e["ts"] + e["dur"]
            if stack:  # a child that ends a hair after its parent (the clocks' rounding) ends with it
                end = min(end, stack[-1][0])
                stack[-1][2] += end - start
            else:
                covered += end - start
            stack.append([end, key, 0.0, end - start])
        while stack:
            close(stack.pop())
    return totals, covered


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=15, help="lines per rank (default 15)")
    ap.add_argument("--rank", type=int, default=None, help="this rank only (default: every rank)")
    a = ap.parse_args(argv)
    try:
        with open(a.trace) as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"trace_summary.py: {a.trace}: not a shardex trace ({err})", file=sys.stderr)
        return 1
    ranks = sorted({e["pid"] for e in events})
    if a.rank is not None:
        if a.rank not in ranks:
            print(f"trace_summary.py: {a.trace} has no rank {a.rank} (ranks {ranks})", file=sys.stderr)
            return 1
        ranks = [a.rank]
    for r in ranks:
        totals, covered = self_times([e for e in events if e["pid"] == r])
        print(f"rank {r}: {covered / 1e3:.1f} ms in spans")
        for (cat, name), (us, n) in sorted(totals.items(), key=lambda kv: -kv[1][0])[: a.top]:
            share = 100.0 * us / covered if covered > 0 else 0.0
            print(f"  {share:5.1f} %  {us / 1e3:10.2f} ms  {n:6d}  {cat:<10} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
