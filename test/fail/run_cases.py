#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Compile every case of cases.cpp and check that it fails with its message.

usage: run_cases.py BUILD_DIR SOURCE [MIN_CASES]

The compile command is the one Meson wrote for SOURCE into compile_commands.json,
so the cases see exactly the flags of the real build. A case passes when the
compiler exits non-zero, its output contains the `// expect:` text, and that
text comes from a static_assert (not from some unrelated error).
"""
import json, os, re, shlex, subprocess, sys
from concurrent.futures import ThreadPoolExecutor

build, source = sys.argv[1], os.path.realpath(sys.argv[2])
min_cases = int(sys.argv[3]) if len(sys.argv) > 3 else 10  # a guard against a broken case pattern
with open(os.path.join(build, "compile_commands.json")) as f:
    entries = [e for e in json.load(f) if os.path.realpath(os.path.join(e["directory"], e["file"])) == source]
if not entries:
    sys.exit(f"run_cases.py: no compile command for {source} in {build}/compile_commands.json")
entry = entries[0]
base = shlex.split(entry["command"])
# Drop the output and dependency-file arguments: the cases only need the front end.
cmd, skip = [], False
for a in base:
    if skip:
        skip = False
        continue
    if a in ("-o", "-MF", "-MQ", "-MT"):
        skip = True
        continue
    if a in ("-MD", "-c"):
        continue
    cmd.append(a)
cmd = [a for a in cmd if a != "-fdiagnostics-color=always"] + ["-fdiagnostics-color=never"]
if os.path.basename(cmd[0]) == "ccache":  # nothing to cache: the cases only parse
    cmd = cmd[1:]

# The cases share the file's #include lines: parse them once, into a
# precompiled header that every case then starts from (-include). If g++
# cannot use it (-Winvalid-pch, an error under -Werror) the cases say so.
def precompile(text):
    includes = [l for l in text.splitlines() if l.startswith("#include ")]
    if not includes or not any(c in os.path.basename(cmd[0]) for c in ("g++", "c++")):
        return []  # the precompiled header below is g++'s
    stem = os.path.join(os.path.realpath(build), "fail_cases_pch", os.path.basename(source) + ".hpp")
    os.makedirs(os.path.dirname(stem), exist_ok=True)
    with open(stem, "w") as f:
        f.write("// The #include lines of " + source + ", precompiled by run_cases.py.\n")
        f.write("\n".join(includes) + "\n")
    src = [a for a in cmd if os.path.realpath(os.path.join(entry["directory"], a)) != source]
    p = subprocess.run(src + ["-x", "c++-header", stem, "-o", stem + ".gch"], cwd=entry["directory"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        print("run_cases.py: the precompiled header failed; compiling every case from scratch:\n" + p.stderr[:2000])
        return []
    return ["-include", stem, "-Winvalid-pch"]

cases = []
text = open(source).read()
for m in re.finditer(r"#(?:el)?if SHARDEX_FAIL_CASE == (\d+)\n\s*// expect: (.*)\n", text):
    cases.append((int(m.group(1)), m.group(2).strip()))
if len(cases) < min_cases:
    sys.exit(f"run_cases.py: found only {len(cases)} cases in {source}")

pch = precompile(text)
syntax_only = cmd + pch + ["-fsyntax-only"]

def run(case):
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

failed = 0
with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
    for n, expect, err in pool.map(run, cases):
        status = "ok" if err is None else "FAIL"
        print(f"case {n:2d} {status}: {expect}")
        if err:
            failed += 1
            print("    " + err.replace("\n", "\n    "))
print(f"{len(cases) - failed} of {len(cases)} compile-fail cases fail as they must")
sys.exit(1 if failed else 0)
