#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Compile time of a translation unit using the whole DSL against a plain Eigen
program of similar size, with the flags of the real build, side by side.

usage: bench/compile_time.py BUILD_DIR [REPEATS]

Prints one JSON object per program and one with the ratio (medians of REPEATS
interleaved compilations, so machine noise hits both alike).
"""
import json, os, shlex, statistics, subprocess, sys, time

build = sys.argv[1]
repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
here = os.path.dirname(os.path.realpath(__file__))
with open(os.path.join(build, "compile_commands.json")) as f:
    db = json.load(f)

def command(name):
    src = os.path.join(here, name)
    for e in db:
        if os.path.realpath(os.path.join(e["directory"], e["file"])) == src:
            args = shlex.split(e["command"])
            out, skip = [], False
            for a in args:
                if skip:
                    skip = False
                    continue
                if a in ("-o", "-MF", "-MQ", "-MT"):
                    skip = True
                    continue
                if a == "-MD":
                    continue
                out.append(a)
            return out + ["-o", os.devnull], e["directory"]
    sys.exit(f"compile_time.py: {name} not in {build}/compile_commands.json (configure with -Dbenchmarks=true)")

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
