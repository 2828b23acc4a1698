#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Summarizes a bench/run results file (JSON lines) as Markdown tables.

    bench/report.py bench/results/results.jsonl > summary.md

Collectives: per ranks, op and sharded dim, the ratio of the strategy
`automatic` picks to the raw MPI call making the same movement (median and
worst over lengths patterns, for 64 KiB and above), its extra microseconds at
4 KiB, and how many cases `automatic` is within 1.10x of the fastest strategy.
MLP step: shardex against PyTorch and against the GEMM floor.
GPT-2 step: shardex against PyTorch Megatron, transformers and its GEMM floor,
with the issue's targets (bench/RESULTS.md's table), and the rounds run with
BENCH_GPT2_ROUNDS, each round's ratio and their mean.
"""
import json
import statistics
import sys
from collections import defaultdict


def load(path):
    rows = []
    for line in open(path):
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


def human(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def strategies(variants):
    """The strategies' times of one case (not the raw calls, not the unchecked rerun)."""
    return {s: x for s, x in variants.items() if not s.startswith("raw") and s != "unchecked"}


def collectives(rows):
    c = [r for r in rows if r.get("bench") == "collectives"]
    if not c:
        return
    cases = defaultdict(dict)
    auto = {}
    for r in c:
        k = (r["ranks"], r["op"], r["pattern"], r["dim"], r["bytes"])
        cases[k][r["variant"]] = r["median_us"]
        auto[k] = r["auto"]
    print("### Every transition against the raw MPI call\n")
    print("`automatic`'s time over the raw call's (the same movement, same run), median and worst")
    print("over the lengths patterns and sizes from 64 KiB; at 4 KiB, the microseconds it adds.")
    print("For strided pieces (inner) the raw reference is the faster hand-written movement (one")
    print("MPI_Alltoallw of vector datatypes, or pack + the contiguous call + unpack); \"contiguous")
    print("call\" is that call alone, which leaves the pieces in the wrong place: a lower bound.")
    print("\"without the agreement\": automatic's pick under CheckLevel::local.\n")
    print("| ranks | op | sharded dim | median, >= 64 KiB | worst, >= 64 KiB (where) | + us at 4 KiB "
          "| without the agreement: median, >= 64 KiB | contiguous call / raw, median |")
    print("|---|---|---|---|---|---|---|---|")
    groups = defaultdict(list)
    for k, v in cases.items():
        groups[(k[0], k[1], k[3])].append((k, v))
    for g in sorted(groups, key=lambda g: (g[0], ["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "reshard"].index(g[1]) if g[1] in ["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "reshard"] else 9, g[2])):
        big = [(v[auto[k]] / v["raw"], k) for k, v in groups[g] if k[4] >= 65536 and "raw" in v and auto[k] in v]
        small = [v[auto[k]] - v["raw"] for k, v in groups[g] if k[4] == 4096 and "raw" in v and auto[k] in v]
        unchecked = [v["unchecked"] / v["raw"] for k, v in groups[g] if k[4] >= 65536 and "raw" in v and "unchecked" in v]
        bound = [v["raw_contiguous"] / v["raw"] for k, v in groups[g] if k[4] >= 65536 and "raw_contiguous" in v]
        if not big:
            continue
        worst = max(big)
        dim = g[2] if g[1] != "all_reduce" else "-"
        med = lambda xs: f"{statistics.median(xs):.2f}x" if xs else "-"
        print(f"| {g[0]} | {g[1]} | {dim} | {statistics.median(x for x, _ in big):.2f}x | {worst[0]:.2f}x "
              f"({worst[1][2]}, {human(worst[1][4])}) | {statistics.median(small):+.1f} | {med(unchecked)} | {med(bound)} |"
              if small else "| - |")
    within = sum(1 for k, v in cases.items() if auto[k] in v and v[auto[k]] <= 1.10 * min(strategies(v).values()))
    total = sum(1 for k, v in cases.items() if auto[k] in v)
    print(f"\n`automatic` within 1.10x of the fastest strategy in {within} of {total} cases.")
    off = []
    for k, v in cases.items():
        strat = strategies(v)
        if auto[k] in strat and strat[auto[k]] > 1.10 * min(strat.values()):
            best = min(strat, key=strat.get)
            off.append((strat[auto[k]] / strat[best], k, auto[k], best))
    if off:
        print("The cases where it is not (ratio to the fastest):\n")
        print("| ranks | op | lengths | dim | bytes | automatic | fastest | ratio |")
        print("|---|---|---|---|---|---|---|---|")
        for ratio, k, a, b in sorted(off, reverse=True):
            print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {human(k[4])} | {a} | {b} | {ratio:.2f}x |")
    ov = [r for r in rows if r.get("bench") == "overhead"]
    if ov:
        print("\nA call that moves nothing (an all_gather of zero rows), microseconds:\n")
        print("| ranks | raw MPI_Allgatherv | the same, armed with the watchdog | shardex | shardex without the agreement |")
        print("|---|---|---|---|---|")
        by = defaultdict(dict)
        for r in ov:
            by[r["ranks"]][r["variant"]] = r["median_us"]
        for n, v in sorted(by.items()):
            watched = f"{v['raw_watched']:.2f}" if "raw_watched" in v else "-"
            print(f"| {n} | {v.get('raw', 0):.2f} | {watched} | {v.get('checked', 0):.2f} | {v.get('local_checks', 0):.2f} |")


def mlp(rows):
    m = [r for r in rows if r.get("bench") == "mlp_step"]
    if not m:
        return
    print("\n### The Megatron MLP step (forward + backward, float32)\n")
    print("| T, H, F | impl | processes x threads | step ms | comm ms | GEMM floor ms | step / floor | shardex / PyTorch (2 ranks) |")
    print("|---|---|---|---|---|---|---|---|")
    for size in sorted({(r["tokens"], r["hidden"], r["ffn"]) for r in m}, reverse=True):
        at = [r for r in m if (r["tokens"], r["hidden"], r["ffn"]) == size]
        pt2 = [r for r in at if r["impl"] == "pytorch" and r["ranks"] == 2]
        for r in sorted(at, key=lambda r: (r["impl"] != "shardex", r["ranks"])):
            floor = f"{r['gemm_floor_ms']:.1f}" if "gemm_floor_ms" in r else "-"
            vs = f"{r['vs_floor']:.2f}x" if "vs_floor" in r else "-"
            ratio = f"{r['step_ms'] / pt2[0]['step_ms']:.2f}x" if r["impl"] == "shardex" and r["ranks"] == 2 and pt2 else ""
            print(f"| {size[0]}, {size[1]}, {size[2]} | {r['impl']} | {r['ranks']} x {r['threads_per_rank']} | "
                  f"{r['step_ms']:.1f} | {r['comm_ms']:.1f} | {floor} | {vs} | {ratio} |")


def gpt2_rounds(rows):
    """The GPT-2 rounds of BENCH_GPT2_ROUNDS: {(batch, seq): [(round, shardex's step_ms,
    Megatron's step_ms), ...]}, the rounds with both lines, in order (bench/run prints them too)."""
    by_shape = defaultdict(dict)
    for r in rows:
        if r.get("bench") == "gpt2_step" and "round" in r:
            by_shape[(r["batch"], r["seq"])].setdefault(r["round"], {})[r["impl"]] = r
    rounds = {}
    for shape, by_round in sorted(by_shape.items()):
        pairs = [(n, v["shardex"]["step_ms"], v["megatron"]["step_ms"]) for n, v in sorted(by_round.items())
                 if {"shardex", "megatron"} <= v.keys() and v["shardex"]["step_ms"] > 0]
        if pairs:
            rounds[shape] = pairs
    return rounds


def gpt2(rows):
    g = [r for r in rows if r.get("bench") == "gpt2_step"]
    single = [r for r in g if "round" not in r]
    if single:
        print("\n### A GPT-2 small training step (float32, 2 ranks)\n")
        print("| batch x seq | shardex | PyTorch Megatron (2 x 1) | transformers (1 x 2) | shardex / Megatron (target 1.25x) "
              "| shardex / transformers (target 1.0x) | shardex / floor (target 1.3x) | peak memory per rank: shardex, Megatron, transformers |")
        print("|---|---|---|---|---|---|---|---|")
    for shape in sorted({(r["batch"], r["seq"]) for r in single}):
        at = [r for r in single if (r["batch"], r["seq"]) == shape]
        peers = [next((r for r in at if r["impl"] == impl), None) for impl in ("megatron", "transformers")]
        # A row per shardex line: tensor parallelism, and sequence parallelism where a line says so.
        for sx in (r for r in at if r["impl"] == "shardex"):
            parts = []  # where the step went, as far as the line says (older lines say less)
            if "forward_ms" in sx:
                parts.append(f"forward {sx['forward_ms']:.0f}, backward {sx['backward_ms']:.0f}, "
                             f"clipping + AdamW {sx['clip_adamw_ms']:.0f} ms")
            if "products_ms" in sx:
                parts.append(f"products {sx['products_ms']:.0f} ms at {sx['products_gflops']:.0f} GFLOP/s, "
                             f"communication {sx['comm_ms']:.0f}, the rest {sx['rest_ms']:.0f}")
            mine = f"{sx['step_ms']:.0f} ms, {sx['tokens_per_s']:.0f} tokens/s" + (f" ({'; '.join(parts)})" if parts else "")
            cells = [f"{p['step_ms']:.0f} ms, {p['tokens_per_s']:.0f} tokens/s" if p else "-" for p in peers]
            ratios = [f"{p['step_ms'] / sx['step_ms']:.2f}x" if p and sx["step_ms"] > 0 else "-" for p in peers]
            floor = (f"{sx['vs_floor']:.2f}x (floor {sx['gemm_floor_ms']:.0f} ms: {sx['step_gflop']:.0f} GFLOP at "
                     f"{sx['gemm_gflops_per_rank']:.0f} GFLOP/s)" if "vs_floor" in sx else "-")
            memory = ", ".join(f"{r['peak_rss_mib']:.0f}" if r else "-" for r in [sx] + peers) + " MiB"
            what = f"{shape[0]} x {shape[1]}" + (" (sequence parallelism)" if sx.get("sequence_parallel") else "")
            print(f"| {what} | {mine} | {cells[0]} | {cells[1]} | {ratios[0]} | {ratios[1]} | {floor} | {memory} |")
    for shape, pairs in gpt2_rounds(rows).items():
        ratios = [m / s for _, s, m in pairs]
        print(f"\nRounds at {shape[0]} x {shape[1]}, shardex's step then Megatron's in each:\n")
        print("| round | shardex | PyTorch Megatron | shardex / Megatron (target 1.25x) |")
        print("|---|---|---|---|")
        for (n, s, m), x in zip(pairs, ratios):
            print(f"| {n} | {s:.0f} ms | {m:.0f} ms | {x:.3f}x |")
        print(f"| mean of {len(pairs)} | {statistics.mean(s for _, s, _ in pairs):.0f} ms | "
              f"{statistics.mean(m for _, _, m in pairs):.0f} ms | **{statistics.mean(ratios):.3f}x** |")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: bench/report.py RESULTS.jsonl")
    rows = load(sys.argv[1])
    collectives(rows)
    mlp(rows)
    gpt2(rows)


if __name__ == "__main__":
    main()
