#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Compile every case of cases.cpp and check that it fails with its message.

usage: run_cases.py BUILD_DIR SOURCE [MIN_CASES]

The compile command is the one Meson wrote for SOURCE into compile_commands.json,
so the cases see exactly the flags of the real build. A case passes when the
compiler exits non-zero, its output contains the `// expect:` text, and that
text comes from a static_assert (not from some unrelated error).

All cases first go through one compiler run: a translation unit that includes
SOURCE once per case, each time in a namespace of its own with SHARDEX_FAIL_CASE
set to that case (47 cases: one run of 8 s, against 160 s of CPU one by one). A case
passes there when a `static assertion failed` with its text is reported with the
case's own lines of SOURCE in its instantiation context ("required from here").
The compiler reports a template's failure once, so of two cases that instantiate
the same one only the first is settled: the cases left go through another such
run, until a run settles none; those still left are compiled alone, as above
(SHARDEX_FAIL_ALONE=1 compiles every case alone, to compare).
"""
import os, re, subprocess, sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "support"))
import compile_command  # noqa: E402 (test/support/compile_command.py)

build, source = sys.argv[1], os.path.realpath(sys.argv[2])
min_cases = int(sys.argv[3]) if len(sys.argv) > 3 else 10  # a guard against a broken case pattern
entry = compile_command.find(build, source)
if entry is None:
    sys.exit(f"run_cases.py: no compile command for {source} in {build}/compile_commands.json")
# Without the output and dependency-file arguments: the cases only need the front end.
cmd = compile_command.arguments(entry)
cmd = [a for a in cmd if a != "-fdiagnostics-color=always"] + ["-fdiagnostics-color=never"]
# The same command without SOURCE, for a unit that includes it (or a precompiled header).
cmd_without_source = [a for a in cmd if os.path.realpath(os.path.join(entry["directory"], a)) != source]
text = open(source).read()
lines = text.splitlines()
includes = [l for l in lines if l.startswith("#include ")]

# The cases compiled alone share the file's #include lines: parse them once, into
# a precompiled header that each of them then starts from (-include). If g++
# cannot use it (-Winvalid-pch, an error under -Werror) the cases say so.
def precompile():
    if not includes or not any(c in os.path.basename(cmd[0]) for c in ("g++", "c++")):
        return []  # the precompiled header below is g++'s
    stem = os.path.join(os.path.realpath(build), "fail_cases_pch", os.path.basename(source) + ".hpp")
    os.makedirs(os.path.dirname(stem), exist_ok=True)
    with open(stem, "w") as f:
        f.write("// The #include lines of " + source + ", precompiled by run_cases.py.\n")
        f.write("\n".join(includes) + "\n")
    p = subprocess.run(cmd_without_source + ["-x", "c++-header", stem, "-o", stem + ".gch"], cwd=entry["directory"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        print("run_cases.py: the precompiled header failed; compiling every case from scratch:\n" + p.stderr[:2000])
        return []
    return ["-include", stem, "-Winvalid-pch"]

cases = []
for m in re.finditer(r"#(?:el)?if SHARDEX_FAIL_CASE == (\d+)\n\s*// expect: (.*)\n", text):
    cases.append((int(m.group(1)), m.group(2).strip()))
if len(cases) < min_cases:
    sys.exit(f"run_cases.py: found only {len(cases)} cases in {source}")

# The lines of SOURCE (1-based, inclusive) that belong to each case: from its
# #if/#elif line to the line before the next #elif, #else or #endif.
case_lines = {}
for i, l in enumerate(lines):
    m = re.match(r"#(?:el)?if SHARDEX_FAIL_CASE == (\d+)$", l)
    if m:
        end = i + 1
        while end < len(lines) and not re.match(r"#(elif|else|endif)\b", lines[end]):
            end += 1
        case_lines[int(m.group(1))] = (i + 1, end)


def case_at(line):
    return next((n for n, (first, last) in case_lines.items() if first <= line <= last), None)


def settled_together(cases):
    """The cases that one compiler run of them all shows failing with their message."""
    unit = os.path.join(os.path.realpath(build), "fail_cases_all", os.path.basename(source))
    os.makedirs(os.path.dirname(unit), exist_ok=True)
    with open(unit, "w") as f:
        f.write("// Every case of " + source + ", each in a namespace of its own (run_cases.py).\n")
        f.write("\n".join(includes) + "\n")
        for n, _ in cases:
            f.write(f"#define SHARDEX_FAIL_CASE {n}\nnamespace shardex_fail_case_{n} {{\n#include \"{source}\"\n}}\n"
                    "#undef SHARDEX_FAIL_CASE\n")
    p = subprocess.run(cmd_without_source + ["-fsyntax-only", "-fmax-errors=0", unit], cwd=entry["directory"],
                       capture_output=True, text=True)
    if p.returncode == 0:
        return set()  # none failed: each alone says which compiled
    # A diagnostic's context starts over at "In file included from" or "FILE: In instantiation
    # of / In function ..."; a location in SOURCE (a "required from here" or the error's own)
    # names the case it belongs to; a static assertion after it is that case's. (Some are
    # instantiated from a default argument, with no location in SOURCE: of a run of one
    # case, every diagnostic is that case's.)
    only = cases[0][0] if len(cases) == 1 else None
    found, current = {}, only
    here = re.compile(re.escape(source) + r":(\d+):\d+:")
    for l in (p.stdout + p.stderr).splitlines():
        if l.startswith("In file included from") or re.match(r"\S.*: In ", l):
            current = only
        m = here.match(l)
        if m:
            current = case_at(int(m.group(1)))
        if current is not None and "error: static assertion failed: " in l:
            found.setdefault(current, []).append(l.split("error: static assertion failed: ", 1)[1])
    return {n for n, expect in cases if any(expect in message for message in found.get(n, []))}


def run(case, syntax_only):
    n, expect = case
    p = subprocess.run(syntax_only + [f"-DSHARDEX_FAIL_CASE={n}"], cwd=entry["directory"], capture_output=True,
                       text=True)
    out = p.stdout + p.stderr
    if p.returncode == 0:
        return n, expect, "compiled, but must not"
    if expect not in out:
        return n, expect, "failed without the expected message:\n" + "\n".join(out.splitlines()[:25])
    if "static assertion failed" not in out:
        return n, expect, "message found, but not from a static_assert"
    return n, expect, None


results, alone, runs = {}, cases, 0
while alone and os.environ.get("SHARDEX_FAIL_ALONE") != "1":
    settled = settled_together(alone)
    runs += 1
    results.update({n: (expect, None, f"run {runs}") for n, expect in alone if n in settled})
    alone = [c for c in alone if c[0] not in settled]
    if not settled:
        break
if alone:
    syntax_only = cmd + precompile() + ["-fsyntax-only"]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for n, expect, err in pool.map(lambda c: run(c, syntax_only), alone):
            results[n] = (expect, err, "alone")
failed = 0
for n, _ in cases:
    expect, err, how = results[n]
    status = "ok" if err is None else "FAIL"
    print(f"case {n:2d} {status} ({how}): {expect}")
    if err:
        failed += 1
        print("    " + err.replace("\n", "\n    "))
print(f"{len(cases) - failed} of {len(cases)} compile-fail cases fail as they must "
      f"({len(cases) - len(alone)} settled in {runs} compiler run(s) of all the cases left, {len(alone)} compiled alone)")
sys.exit(1 if failed else 0)
