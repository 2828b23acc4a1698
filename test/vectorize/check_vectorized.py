#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check that g++ vectorizes every host loop under SHARDEX_SIMD, at each x86-64 level.

usage: check_vectorized.py BUILD_DIR SOURCE...

A loop the compiler leaves scalar still gives the right values, only 5-10x
slower, on some machines and not others: on AVX2 (no masked operations) g++
gave up on the fused passes around a gelu, where on AVX-512 it had vectorized
them (bench/RESULTS.md). So each SOURCE is compiled here with the flags Meson
wrote for it into compile_commands.json, at -O2 (as the library and a
debugoptimized or release build; the test programs build at -O0), its -march replaced in turn by
x86-64 (SSE2), x86-64-v3 (AVX2) and x86-64-v4 (AVX-512), with
-fopt-info-vec-all. Every loop that starts on the line after a SHARDEX_SIMD
(in the headers and sources the compiler reports on) must be reported
vectorized at least once and never "couldn't vectorize". Exits 77 (SKIP) with
the reason where the compiler is not g++ or the machine not x86-64.
"""
import os, platform, re, subprocess, sys, tempfile
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "support"))
import compile_command  # noqa: E402 (test/support/compile_command.py)

build, sources = sys.argv[1], [os.path.realpath(s) for s in sys.argv[2:]]
if platform.machine() not in ("x86_64", "AMD64"):
    print(f"SKIP: the x86-64 levels are checked on x86-64; this machine is {platform.machine()}")
    sys.exit(77)


def command_for(source):
    entry = compile_command.find(build, source)
    if entry is None:
        sys.exit(f"check_vectorized.py: no compile command for {source} in {build}/compile_commands.json")
    return entry


def simd_loop_lines(path):
    """The 1-based lines that follow a SHARDEX_SIMD line in `path`."""
    lines = open(path).read().splitlines()
    return {i + 2 for i, l in enumerate(lines) if l.strip() == "SHARDEX_SIMD"}


def compile_at(entry, level):
    cmd = compile_command.arguments(entry, drop=lambda a: a.startswith(("-march=", "-fdiagnostics-color", "-O")))
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as report:
        p = subprocess.run(cmd + ["-O2", f"-march={level}", "-c", "-o", os.devnull, f"-fopt-info-vec-all={report.name}"],
                           cwd=entry["directory"], capture_output=True, text=True)
        return p, report.read()


compiler = compile_command.arguments(command_for(sources[0]))[0]
version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
if "Free Software Foundation" not in version or "clang" in version:
    print(f"SKIP: the reports read here are g++'s (-fopt-info-vec); the compiler is {compiler}: "
          f"{version.splitlines()[0] if version else 'no --version'}")
    sys.exit(77)

levels = ["x86-64", "x86-64-v3", "x86-64-v4"]
jobs = [(s, level) for s in sources for level in levels]
with ThreadPoolExecutor(max_workers=2) as pool:
    results = list(pool.map(lambda j: compile_at(command_for(j[0]), j[1]), jobs))

failures, checked = [], 0
for (source, level), (p, report) in zip(jobs, results):
    name = os.path.relpath(source)
    if p.returncode != 0:
        failures.append(f"{name} at -march={level} does not compile:\n{p.stderr[:3000]}")
        continue
    # "path:line:col: optimized: loop vectorized ..." / "missed: couldn't vectorize loop"
    seen = {}
    for m in re.finditer(r"^(\S+?):(\d+):\d+: (optimized: loop vectorized|missed: couldn't vectorize loop)", report,
                         re.M):
        path = os.path.realpath(os.path.join(build, m.group(1)))
        seen.setdefault((path, int(m.group(2))), set()).add(m.group(3).split(":")[0])
    for path in sorted({path for path, _ in seen}):
        if not os.path.exists(path) or "SHARDEX_SIMD" not in open(path).read():
            continue
        for line in sorted(simd_loop_lines(path)):
            verdicts = seen.get((path, line))
            if verdicts is None:
                continue  # a loop this source does not instantiate
            checked += 1
            where = f"{os.path.relpath(path)}:{line} (compiling {name} at -march={level})"
            if "missed" in verdicts:
                failures.append(f"{where}: g++ left a SHARDEX_SIMD loop scalar; its report:\n" + "\n".join(
                    l for l in report.splitlines() if f":{line}:" in l and os.path.basename(path) in l)[:3000])
            else:
                print(f"ok: {where} vectorized")

if failures:
    print("\n\n".join(failures))
    sys.exit(1)
if checked < len(jobs):  # at least a loop per source and level
    sys.exit(f"check_vectorized.py: only {checked} SHARDEX_SIMD loops found in the reports (a broken pattern?)")
print(f"{checked} SHARDEX_SIMD loops vectorized at {', '.join(levels)}")
