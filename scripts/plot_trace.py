#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Draw a shardex trace (SHARDEX_TRACE=run.json) as a PNG timeline.

usage: scripts/plot_trace.py [-o OUT.png] [--from MS] [--to MS] TRACE.json

One row per rank; in each, the evaluated expressions and backward steps as
wide pale bars underneath, and the transitions on top: collectives in red,
local transitions (slice, replicate, zero_pad) in blue. The same file opens
in Perfetto (ui.perfetto.dev) or chrome://tracing for the details of each
event (layouts, lengths, strategy, bytes, communicator).
Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import sys
from collections import defaultdict

try:
    import matplotlib
except ImportError:
    sys.exit(f"plot_trace.py: needs matplotlib, which {sys.executable} does not have (Debian: apt-get install "
             "python3-matplotlib" + (", then run it with /usr/bin/python3)" if sys.executable != "/usr/bin/python3" else ")"))

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

ROWS = {  # category -> (vertical offset within a rank's row, height, colour)
    "eval": (0.05, 0.25, "#c7d7ea"),
    "backward": (0.05, 0.25, "#f3d7a7"),
    "local": (0.35, 0.3, "tab:blue"),
    "collective": (0.35, 0.55, "tab:red"),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("-o", "--out", default="trace.png")
    ap.add_argument("--from", dest="t0", type=float, default=None, help="start of the window, ms")
    ap.add_argument("--to", dest="t1", type=float, default=None, help="end of the window, ms")
    a = ap.parse_args()
    events = [e for e in json.load(open(a.trace))["traceEvents"] if e.get("ph") == "X"]
    if not events:
        sys.exit(f"{a.trace}: no events")
    t0 = a.t0 if a.t0 is not None else 0.0
    t1 = a.t1 if a.t1 is not None else max(e["ts"] + e["dur"] for e in events) / 1e3
    bars = defaultdict(list)  # (pid, cat) -> [(start, width)]
    for e in events:
        s, d = e["ts"] / 1e3, e["dur"] / 1e3
        if s + d < t0 or s > t1:
            continue
        bars[(e["pid"], e["cat"])].append((s, max(d, (t1 - t0) / 2000)))  # at least a visible sliver
    ranks = sorted({e["pid"] for e in events})
    fig, ax = plt.subplots(figsize=(11, 1.0 + 0.8 * len(ranks)))
    for (pid, cat), spans in bars.items():
        off, h, colour = ROWS.get(cat, (0.05, 0.25, "grey"))
        ax.broken_barh(spans, (pid + off, h), facecolors=colour, edgecolor="none")
    ax.set_yticks([r + 0.5 for r in ranks])
    ax.set_yticklabels([f"rank {r}" for r in ranks])
    ax.set_ylim(min(ranks), max(ranks) + 1)
    ax.invert_yaxis()
    ax.set_xlim(t0, t1)
    ax.set_xlabel("time (ms, rank 0's clock)")
    ax.grid(True, axis="x", alpha=0.3)
    counts = defaultdict(int)
    for e in events:
        counts[e["cat"]] += 1
    ax.legend(handles=[Patch(color=c, label=f"{k} ({counts[k]})") for k, (_, _, c) in ROWS.items()],
              loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(ranks) < 3 else -0.12), ncol=4, frameon=False)
    ax.set_title(a.trace.split("/")[-1])
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}: {len(events)} events, {len(ranks)} ranks")


if __name__ == "__main__":
    main()
