#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Compile time of a translation unit using the whole DSL against a plain Eigen
program of similar size, with the flags of the real build, side by side.

usage: bench/compile_time.py BUILD_DIR [REPEATS]

Prints one JSON object per program and one with the ratio (medians of REPEATS
interleaved compilations, so machine noise hits both alike).
"""
import json, os, statistics, subprocess, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "test", "support"))
import compile_command  # noqa: E402 (test/support/compile_command.py)

build = sys.argv[1]
repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
here = os.path.dirname(os.path.realpath(__file__))


def command(name):
    entry = compile_command.find(build, os.path.join(here, name))
    if entry is None:
        sys.exit(f"compile_time.py: {name} not in {build}/compile_commands.json (configure with -Dbenchmarks=true)")
    return compile_command.arguments(entry) + ["-c", "-o", os.devnull], entry["directory"]

programs = {"dsl": command("compile_dsl.cpp"), "eigen": command("compile_eigen.cpp")}
times = {k: [] for k in programs}
for _ in range(repeats):
    for name, (cmd, cwd) in programs.items():
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, check=True)
        times[name].append(time.perf_counter() - t0)
med = {k: statistics.median(v) for k, v in times.items()}
for k in programs:
    print(json.dumps({"program": f"bench/compile_{k}.cpp", "median_s": round(med[k], 2), "runs_s": [round(t, 2) for t in times[k]]}))
print(json.dumps({"ratio_dsl_over_eigen": round(med["dsl"] / med["eigen"], 2)}))
