#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""examples/gpt2's run options that no other test reaches (issue #26).

    check_gpt2_run.py GPT2 PLOT_SCRIPT MPIRUN [MPIRUN_ARGS...]

On 2 ranks, a small model on a short text:
- `--log run.csv --speeds auto --expect-val-below 10`: exits 0; the speeds are
  measured and split the MLP columns; the CSV has its header and one line per
  step, whose losses and validation losses are the ones printed (the
  validation loss at the --eval-every steps alone); the bound is said met;
  scripts/plot_losses.py draws the CSV (the test says SKIP, not OK, where
  matplotlib is not installed).
- `--expect-val-below 0.5`: exits 4 (did not learn) and says the loss is not below.
- `--expect-val-below 10 --eval-every 0`: exits 4, no validation loss measured.
- `--load` of a Hugging Face checkpoint whose names lack the `transformer.`
  prefix (as GPT2Model saves them): `--eval` gives the same loss as the same
  weights with the prefix (SKIP where the safetensors package is missing).
"""
import csv
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plotting  # noqa: E402  (beside this file)

SMALL = ["--layers", "1", "--heads", "2", "--width", "8", "--context", "16", "--batch", "2", "--seq", "8"]


def main():
    gpt2, plot, mpirun, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    failures = []

    def run(extra, want):
        cmd = [mpirun] + args + ["-n", "2", gpt2] + SMALL + extra
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="backslashreplace",
                           timeout=120)
        if p.returncode != want:
            failures.append(f"{' '.join(extra)}: exit {p.returncode}, want {want}:\n{p.stdout}")
        return p.stdout

    def expect(what, ok, output=""):
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            failures.append(what + ("\n" + output if output else ""))

    with tempfile.TemporaryDirectory() as d:
        text = os.path.join(d, "text.txt")
        with open(text, "w") as f:
            f.write("the quick brown fox jumps over the lazy dog. " * 60)
        data = ["--data", text]

        # --log, --speeds auto and a bound that is met.
        log = os.path.join(d, "run.csv")
        out = run(data + ["--steps", "24", "--eval-every", "8", "--speeds", "auto", "--log", log,
                          "--expect-val-below", "10"], 0)
        m = re.search(r"--speeds auto: measured GFLOP/s per rank ([0-9.]+) ([0-9.]+)", out)
        expect("--speeds auto measures a rate per rank", m is not None and min(map(float, m.groups())) > 0, out)
        cols = re.search(r"MLP columns \[(\d+),(\d+)\]", out)
        expect("--speeds auto's split covers the MLP's 32 columns",
               cols is not None and sum(map(int, cols.groups())) == 32, out)
        expect("the bound met is said so", re.search(r"validation loss [0-9.]+ is below 10 ", out) is not None, out)
        printed = {int(s): (float(l), v) for s, l, v in
                   re.findall(r"step +(\d+)/24  loss ([0-9.]+) .*?(?:val loss ([0-9.]+))?$", out, re.M)}
        rows = list(csv.reader(open(log))) if os.path.exists(log) else []
        expect("--log's header", rows[:1] == [["step", "loss", "val_loss", "lr", "grad_norm", "step_ms",
                                               "tokens_per_s"]], str(rows[:1]))
        expect("--log has a line per step", [r[0] for r in rows[1:]] == [str(i) for i in range(1, 25)],
               str(rows))
        same = len(printed) == 24
        for r in rows[1:]:
            step, loss, val = int(r[0]), float(r[1]), r[2]
            shown_loss, shown_val = printed.get(step, (None, None))
            same = same and shown_loss is not None and abs(loss - shown_loss) < 1e-4
            if step % 8 == 0:
                same = same and shown_val and abs(float(val) - float(shown_val)) < 1e-4
            else:
                same = same and val == "nan" and not shown_val
        expect("--log's losses and validation losses are the ones printed, validation at steps 8, 16, 24", same,
               out + "\n" + open(log).read() if os.path.exists(log) else out)
        drawn = plotting.draw(plot, log, d)  # 0 drawn, 1 failed, 77 no matplotlib
        if drawn == 1:
            failures.append(f"scripts/plot_losses.py could not draw the GPT-2 log {log}")

        # Bounds not met.
        out = run(data + ["--steps", "24", "--eval-every", "8", "--expect-val-below", "0.5"], 4)
        expect("a bound not met exits 4 and says so",
               re.search(r"validation loss [0-9.]+: NOT below 0.5 ", out) is not None, out)
        out = run(data + ["--steps", "24", "--eval-every", "0", "--expect-val-below", "10"], 4)
        expect("no validation loss to judge exits 4", "not measured at the last step" in out, out)

        # A checkpoint without the transformer. prefix.
        try:
            from safetensors.numpy import load_file, save_file
        except ImportError:
            print("SKIP (one case) a checkpoint without the transformer. prefix: the safetensors package is not "
                  "importable")
        else:
            good = os.path.join(d, "good")
            run(data + ["--steps", "4", "--eval-every", "0", "--save", good], 0)
            bare = os.path.join(d, "bare")
            os.makedirs(bare)
            tensors = load_file(os.path.join(good, "model.safetensors"))
            renamed = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in tensors.items()}
            expect("the saved checkpoint has transformer. names", len(renamed) == len(tensors) and any(
                k.startswith("transformer.h.0.") for k in tensors))
            save_file(renamed, os.path.join(bare, "model.safetensors"), metadata={"format": "pt"})
            with open(os.path.join(good, "config.json")) as f, open(os.path.join(bare, "config.json"), "w") as g:
                g.write(f.read())
            losses = []
            for path in (good, bare):
                out = run(data + ["--eval", "--load", path, "--eval-batches", "4"], 0)
                found = re.search(r"^eval loss: ([0-9.]+) ", out, re.M)
                losses.append(found.group(1) if found else None)
            expect(f"--eval of the weights with and without the prefix: {losses[0]} and {losses[1]}",
                   losses[0] is not None and losses[0] == losses[1])

    if failures:
        sys.exit("check_gpt2_run:\n" + "\n".join(failures))
    print("gpt2: --log, --speeds auto, --expect-val-below and unprefixed checkpoints as documented")
    if drawn == plotting.SKIP:
        sys.exit(plotting.SKIP)


if __name__ == "__main__":
    main()
