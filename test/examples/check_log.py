#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""An example's --log file, and its plot: runs EXAMPLE on 2 ranks with
--steps 6 --log, checks the CSV (one row per step, the sharded loss equal to
the unsharded one, times positive), then draws it with scripts/plot_losses.py
(SKIP, exit 77, where matplotlib is not installed).

    check_log.py EXAMPLE PLOT_SCRIPT MPIRUN [MPIRUN_ARGS...]
"""
import csv
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plotting  # noqa: E402  (beside this file)


def main():
    exe, plot, mpirun, mpirun_args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "run.csv")
        subprocess.run([mpirun] + mpirun_args + ["-n", "2", exe, "--steps", "6", "--speeds", "1,3", "--log", log], check=True,
                       stdout=subprocess.DEVNULL)
        rows = list(csv.DictReader(open(log)))
        problems = []
        if [int(r["step"]) for r in rows] != list(range(6)):
            problems.append(f"steps {[r['step'] for r in rows]}, not 0..5")
        for r in rows:
            a, b = float(r["loss"]), float(r["unsharded_loss"])
            if not abs(a - b) <= 1e-10 * max(1.0, abs(b)):
                problems.append(f"step {r['step']}: loss {a} but the unsharded model's {b}")
            if not float(r["step_ms"]) > 0:
                problems.append(f"step {r['step']}: time {r['step_ms']} ms")
        return plotting.verdict_then_draw("--log", problems, f"{len(rows)} steps, sharded loss equal to the unsharded one",
                                          plot, log, tmp)


if __name__ == "__main__":
    sys.exit(main())
