#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every source file of the repository carries the licence's SPDX line.

usage: check_spdx.py SRC_ROOT [--must-refuse FILE ...]

With --must-refuse, passes only if each FILE is refused for a missing line
(the fixture test: the check fails for its reason, not any); otherwise every file git tracks that holds code or build logic (C++, CUDA,
Python, shell, Meson, CMake and the templates Meson fills in). The line is
`SPDX-License-Identifier: MIT` in the file's comment syntax, within its first
three lines (after a shebang).
"""
import os, subprocess, sys

LINE = "SPDX-License-Identifier: MIT"
CODE = (".cpp", ".hpp", ".cu", ".h", ".py", ".in", ".dox", "meson.build", "CMakeLists.txt")
SCRIPTS = ("scripts/", ".ci/", "bench/run")

root = sys.argv[1]
must_refuse = sys.argv[2:3] == ["--must-refuse"]
files = sys.argv[3:] if must_refuse else []
if not must_refuse:
    listed = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True)
    if listed.returncode != 0:
        print("SKIP spdx: not a git checkout (" + listed.stderr.strip() + ")")
        sys.exit(77)
    files = [os.path.join(root, f) for f in listed.stdout.split()
             if (f.endswith(CODE) or f.startswith(SCRIPTS)) and not f.startswith("test/headers/bad_spdx/")]
missing = []
for f in files:
    with open(f, encoding="utf-8", errors="replace") as fh:
        head = [fh.readline() for _ in range(3)]
    if not any(LINE in l for l in head):
        missing.append(os.path.relpath(f, root))
for m in missing:
    print(f"{m}: no '{LINE}' line in its first three lines")
if must_refuse:
    refused = len(missing) == len(files) > 0
    print("the fixture is refused, as it must be" if refused else "the fixture was not refused")
    sys.exit(0 if refused else 1)
if missing:
    sys.exit(1)
print(f"spdx: {len(files)} files, each with its licence line")
