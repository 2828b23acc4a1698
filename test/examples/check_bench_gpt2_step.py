#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench_gpt2_step runs and reports what it measured (bench/gpt2_step.cpp).

    check_bench_gpt2_step.py BENCH REPORT MPIRUN [MPIRUN_ARGS...]

A small GPT-2 (3 heads, a vocabulary of 101: uneven over 2 and 3 ranks) at 1,
2 and 3 ranks, with tensor parallelism alone and with --sequence-parallel.
Each run must exit 0 and print one JSON object that says what was run (ranks,
sizes, sequence_parallel), whose times are positive and consistent (tokens/s
from the step's time, the parts within the step), and whose first loss is the
same at every world size and either way (float32: 1e-5 relative) and about
ln(vocabulary), as a model initialized at std 0.02 gives. Then bench/report.py
(REPORT) summarizes the 2-rank runs (their steps slowed 1000 times) beside Megatron lines made for the check
(1.5 times the step's time; in two rounds 1.2 and 1.4 times): its table must
say 1.50x, and its rounds 1.200x, 1.400x and a mean of 1.300x.
"""
import json
import math
import subprocess
import sys
import tempfile

SMALL = ["--layers", "2", "--heads", "3", "--width", "24", "--context", "32", "--vocab", "101",
         "--batch", "2", "--seq", "16", "--steps", "2", "--warmup", "1", "--tune-gemm", "0"]


def run(bench, mpirun, ranks, extra):
    cmd = (mpirun + ["-n", str(ranks)] if ranks > 1 else []) + [bench] + SMALL + extra
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    what = " ".join(cmd)
    if p.returncode != 0:
        sys.exit(f"FAIL: {what} exited {p.returncode}\n{p.stdout}{p.stderr}")
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    if len(lines) != 1:
        sys.exit(f"FAIL: {what} printed {len(lines)} lines on stdout, not one JSON object:\n{p.stdout}")
    return what, json.loads(lines[0])


def check_report(report, tp, sp):
    """bench/report.py's GPT-2 table and rounds from two real lines and peers made to known ratios."""
    def peer(d, factor, **extra):
        return {**extra, "bench": "gpt2_step", "impl": "megatron", "ranks": 2, "threads": 1, "batch": d["batch"],
                "seq": d["seq"], "step_ms": d["step_ms"] * factor, "tokens_per_s": d["tokens_per_s"] / factor,
                "peak_rss_mib": 1.0}
    # The small model's steps take about a millisecond: slowed 1000 times, so that the report's whole
    # milliseconds tell the rounds apart.
    tp, sp = ({**d, "step_ms": d["step_ms"] * 1000, "tokens_per_s": d["tokens_per_s"] / 1000} for d in (tp, sp))
    rows = [tp, peer(tp, 1.5), {**tp, "round": 1}, peer(tp, 1.2, round=1), {**sp, "round": 2}, peer(sp, 1.4, round=2)]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
        f.flush()
        p = subprocess.run([sys.executable, report, f.name], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        sys.exit(f"FAIL: bench/report.py exited {p.returncode}\n{p.stdout}{p.stderr}")
    table = [l for l in p.stdout.splitlines() if l.startswith("| 2 x 16 |")]
    if len(table) != 1 or "| 1.50x | - |" not in table[0]:
        sys.exit(f"FAIL: bench/report.py's GPT-2 row should say 1.50x over Megatron and no transformers:\n{p.stdout}")
    lines = p.stdout.splitlines()
    for n, d, factor in ((1, tp, 1.2), (2, sp, 1.4)):
        want = f"| {n} | {d['step_ms']:.0f} ms | {d['step_ms'] * factor:.0f} ms | {factor:.3f}x |"
        if want not in lines:
            sys.exit(f"FAIL: bench/report.py's rounds lack the row {want!r}:\n{p.stdout}")
    mean = [l for l in lines if l.startswith("| mean of 2 |")]
    if len(mean) != 1 or not mean[0].endswith("| **1.300x** |"):
        sys.exit(f"FAIL: bench/report.py's rounds should end with a mean of 2 rounds at 1.300x:\n{p.stdout}")
    print("OK: bench/report.py's GPT-2 table and rounds: 1.50x, and 1.200x, 1.400x, mean 1.300x")


def main():
    bench, report, mpirun = sys.argv[1], sys.argv[2], sys.argv[3:]
    losses = {}
    two_ranks = {}
    for ranks in (1, 2, 3):
        for sp in (False, True):
            what, d = run(bench, mpirun, ranks, ["--sequence-parallel"] if sp else [])
            expect = {"bench": "gpt2_step", "impl": "shardex", "ranks": ranks, "sequence_parallel": sp, "batch": 2,
                      "seq": 16, "layers": 2, "heads": 3, "width": 24, "vocab": 101, "steps": 2}
            wrong = {k: (d.get(k), v) for k, v in expect.items() if d.get(k) != v}
            if wrong:
                sys.exit(f"FAIL: {what}: fields (printed, expected) {wrong}")
            if not d["step_ms"] > 0 or not math.isclose(d["tokens_per_s"], 2 * 16 / (d["step_ms"] / 1e3), rel_tol=1e-4):
                sys.exit(f"FAIL: {what}: tokens/s {d['tokens_per_s']} is not 32 tokens over {d['step_ms']} ms")
            for part in ("forward_ms", "backward_ms", "clip_adamw_ms", "products_ms"):
                if not 0 < d[part] <= d["step_ms"] * 1.5:  # rank 0's parts against the slowest rank's step
                    sys.exit(f"FAIL: {what}: {part} {d[part]} is not within the step's {d['step_ms']} ms")
            if not d["peak_rss_mib"] > 0 or not d["gemm_floor_ms"] > 0:
                sys.exit(f"FAIL: {what}: no peak memory or no floor: {d}")
            losses[(ranks, sp)] = d["first_loss"]
            if ranks == 2:
                two_ranks[sp] = d
            print(f"ranks {ranks}{' sequence-parallel' if sp else ''}: first loss {d['first_loss']}, "
                  f"step {d['step_ms']:.2f} ms")
    first = losses[(1, False)]
    if abs(first - math.log(101)) > 0.1:
        sys.exit(f"FAIL: the first loss {first} is not about ln(101) = {math.log(101):.4f}")
    off = {k: v for k, v in losses.items() if not math.isclose(v, first, rel_tol=1e-5)}
    if off:
        sys.exit(f"FAIL: first losses differ from one rank's {first}: {off}")
    print("OK: the same first loss at 1-3 ranks, with and without sequence parallelism")
    check_report(report, two_ranks[False], two_ranks[True])


if __name__ == "__main__":
    main()
