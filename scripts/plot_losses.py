#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Draw the examples' training logs (--log run.csv) as a PNG.

usage: scripts/plot_losses.py [-o OUT.png] [--title TITLE] RUN.csv [RUN.csv ...]

Each CSV (step,loss,unsharded_loss,step_ms, as the MLP examples write it)
gives one line in each panel: the loss of the sharded run against the step
(log scale), with the unsharded model's loss dotted beneath it (they should
lie on each other), and the step's wall time. A GPT-2 log (examples/gpt2:
step,loss,val_loss,lr,grad_norm,step_ms,tokens_per_s) gives the training loss
with the validation loss as points where it was measured. The label is the
file's name.
Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import csv
import os
import sys

try:
    import matplotlib
except ImportError:
    sys.exit(f"plot_losses.py: needs matplotlib, which {sys.executable} does not have (Debian: apt-get install "
             "python3-matplotlib" + (", then run it with /usr/bin/python3)" if sys.executable != "/usr/bin/python3" else ")"))

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def read(path):
    """(step, loss, the second loss (unsharded or validation), its kind, step_ms) of a --log file."""
    rows = list(csv.DictReader(open(path)))
    if not rows or "loss" not in rows[0]:
        sys.exit(f"{path}: not an example's --log file (expected the columns step,loss,unsharded_loss,step_ms)")
    col = lambda k: [float(r[k]) for r in rows]
    kind = "val_loss" if "val_loss" in rows[0] else "unsharded_loss"
    return col("step"), col("loss"), col(kind), kind, col("step_ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("-o", "--out", default="losses.png")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    for path in a.runs:
        step, loss, other, kind, ms = read(path)
        label = os.path.splitext(os.path.basename(path))[0]
        (line,) = top.plot(step, loss, lw=2 if kind == "unsharded_loss" else 1, label=f"{label} (sharded)")
        if kind == "unsharded_loss":
            top.plot(step, other, ls=":", lw=2, color="black", alpha=0.6,
                     label="unsharded model" if path == a.runs[0] else None)
        else:  # the validation loss, where it was measured (NaN elsewhere)
            at = [(s, v) for s, v in zip(step, other) if v == v]
            top.plot([s for s, _ in at], [v for _, v in at], "o-", color=line.get_color(), mec="black",
                     label=f"{label} (validation)")
        bottom.plot(step, ms, lw=1.5, color=line.get_color(), label=label)
    top.set_yscale("log")
    top.set_ylabel("loss")
    top.grid(True, which="both", alpha=0.3)
    top.legend()
    if a.title:
        top.set_title(a.title)
    bottom.set_ylabel("step time (ms)")
    bottom.set_xlabel("step")
    bottom.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
