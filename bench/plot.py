#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Plot the collective benchmark's results (JSON lines from bench/collectives).

usage: bench/plot.py [-o OUT.png] [--pattern PATTERN] [--dim DIM] FILE...

One subplot per (ranks, op): time (us, log) against message size (bytes,
log2) for the raw MPI call making the same movement (black, thick; for
strided pieces the faster of the hand-written ways, with the contiguous call
that leaves them in the wrong place as a thin grey lower bound), shardex with the strategy that
`auto` names at each size ("shardex (automatic)"), and each other strategy
(thin, dashed). Only rows with the given pattern and dim are drawn. Lines not
starting with '{' and rows whose "bench" is not "collectives" are ignored.
"""
import argparse, json, os, sys
from collections import defaultdict

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import FixedLocator, NullLocator

OPS = ["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "reshard"]
STRATEGIES = ["padded", "per_root", "v_collective", "send_recv"]
STYLE = {"padded": "tab:blue", "per_root": "tab:orange",
         "v_collective": "tab:green", "send_recv": "tab:red"}


def human_bytes(n):
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            v = n / size
            return f"{v:g}{unit}" if v == int(v) else f"{v:.3g}{unit}"
    return f"{n:g}"


def load(paths, pattern, dim):
    """rows[(ranks, op)][variant][bytes] = median_us; auto[(ranks, op)][bytes] = variant."""
    rows = defaultdict(lambda: defaultdict(dict))
    auto = defaultdict(dict)
    for path in paths:
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as e:
                    print(f"plot.py: {path}:{lineno}: skipped ({e})", file=sys.stderr)
                    continue
                if r.get("bench") != "collectives":
                    continue
                if str(r.get("pattern")) != pattern or str(r.get("dim", dim)) != dim:
                    continue
                try:
                    key = (int(r["ranks"]), r["op"])
                    n, variant, us = int(r["bytes"]), r["variant"], float(r["median_us"])
                except (KeyError, TypeError, ValueError):
                    continue
                rows[key][variant][n] = us
                if r.get("auto"):
                    auto[key][n] = r["auto"]
    return rows, auto


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", help="JSON-lines files from bench/collectives")
    p.add_argument("-o", "--output", default=os.path.join("bench", "collectives.png"))
    p.add_argument("--pattern", default="even")
    p.add_argument("--dim", default="outer")
    a = p.parse_args()

    rows, auto = load(a.files, a.pattern, a.dim)
    if not rows:
        sys.exit(f"plot.py: no collectives rows with pattern {a.pattern} and dim {a.dim}")
    ranks = sorted({k[0] for k in rows})
    present = {k[1] for k in rows}
    ops = [o for o in OPS if o in present] + sorted(present - set(OPS))

    fig, axes = plt.subplots(len(ranks), len(ops), squeeze=False,
                             figsize=(4.2 * len(ops), 3.4 * len(ranks)))
    for i, nr in enumerate(ranks):
        for j, op in enumerate(ops):
            ax = axes[i][j]
            ax.set_title(f"{op}, {nr} ranks")
            data = rows.get((nr, op))
            if not data:
                ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
                ax.set_xticks([]); ax.set_yticks([])
                continue
            sizes = set()
            if "raw" in data:
                xs = sorted(data["raw"])
                ax.plot(xs, [data["raw"][x] for x in xs], color="black", lw=2.5,
                        marker="o", ms=3, label="raw MPI", zorder=3)
                sizes.update(xs)
            if "raw_contiguous" in data:
                xs = sorted(data["raw_contiguous"])
                ax.plot(xs, [data["raw_contiguous"][x] for x in xs], color="grey", lw=1,
                        label="contiguous call (bound)", zorder=3)
            chosen = auto.get((nr, op), {})
            xs = sorted(x for x, v in chosen.items() if x in data.get(v, {}))
            if xs:
                ax.plot(xs, [data[chosen[x]][x] for x in xs], color="tab:purple", lw=2,
                        marker="o", ms=3, label="shardex (automatic)", zorder=4)
                sizes.update(xs)
            others = [v for v in STRATEGIES if v in data] + \
                     sorted(v for v in set(data) - set(STRATEGIES) if not v.startswith("raw") and v != "unchecked")
            for v in others:
                vx = sorted(data[v])
                ax.plot(vx, [data[v][x] for x in vx], lw=0.9, ls="--",
                        color=STYLE.get(v), label=v, zorder=2)
                sizes.update(vx)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ticks = sorted(sizes)
            if len(ticks) > 8:  # keep every k-th size so the labels stay legible
                k = -(-len(ticks) // 8)
                ticks = ticks[::k]
            ax.xaxis.set_major_locator(FixedLocator(ticks))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xticklabels([human_bytes(t) for t in ticks], fontsize=8)
            ax.grid(True, which="both", alpha=0.3)
            ax.set_xlabel("bytes")
            if j == 0:
                ax.set_ylabel("time (µs)")
            ax.legend(fontsize=7)
    fig.suptitle(f"shardex collectives vs raw MPI — pattern {a.pattern}, dim {a.dim}")
    fig.tight_layout()
    out_dir = os.path.dirname(a.output)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    fig.savefig(a.output, dpi=120)
    print(a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
