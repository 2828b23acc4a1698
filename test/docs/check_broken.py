#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The docs test refuses a page whose block does not compile, for that block's error.

usage: check_broken.py BUILD_ROOT SRC_ROOT FIXTURE

FIXTURE (test/docs/fixtures/broken.md) holds a block that compiles and, after an
`<!-- expect: TEXT -->` comment, one that must not. Its blocks are generated as the
pages' are (extract_blocks.py --single) and compiled with the command Meson wrote into
compile_commands.json for the docs program's first unit, front end only. Passes when the
compiler fails, its output has TEXT, an error names a line of the broken block (through the
generated #line directives), and no line of the good block is named. Any other outcome
(it compiles, another error, an error in the good block) fails.
"""
import json, os, re, shlex, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import extract_blocks

build, root, fixture = sys.argv[1], os.path.realpath(sys.argv[2]), os.path.realpath(sys.argv[3])
page = os.path.relpath(fixture, root)
text = open(fixture, encoding="utf-8").read()
expect = re.search(r"<!--\s*expect:\s*(.*?)\s*-->", text)
blocks = extract_blocks.parse(root, page)
if not expect or len(blocks) != 2:
    sys.exit(f"check_broken.py: {page} must hold an expect comment and two ```cpp blocks (has {len(blocks)})")
good, bad = blocks
expect = expect.group(1)

with open(os.path.join(build, "compile_commands.json")) as f:
    entries = [e for e in json.load(f) if e["file"].endswith("docs_blocks_0.cpp")]
if not entries:
    sys.exit(f"check_broken.py: no compile command for docs_blocks_0.cpp in {build}/compile_commands.json")
entry = entries[0]
with tempfile.TemporaryDirectory() as tmp:
    src = os.path.join(tmp, "broken.cpp")
    subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "extract_blocks.py"),
                    root, "--single", page, src], check=True)
    cmd, skip = [], False
    for a in shlex.split(entry["command"]):
        if skip:
            skip = False
        elif a in ("-o", "-MF", "-MQ", "-MT"):
            skip = True
        elif a in ("-MD", "-c", "-fdiagnostics-color=always"):
            pass
        elif a == entry["file"]:
            cmd.append(src)
        else:
            cmd.append(a)
    if src not in cmd:
        sys.exit("check_broken.py: the source file is not in its compile command")
    # The generated unit's #line directives name the page relative to the source root; the
    # compiler prints that name, so it runs from the source root's view of the page.
    p = subprocess.run(cmd + ["-fsyntax-only", "-fdiagnostics-color=never"], cwd=entry["directory"],
                       capture_output=True, text=True)
out = p.stdout + p.stderr
named = {int(m.group(1)) for m in re.finditer(re.escape(page) + r":(\d+):", out)}
in_bad = {l for l in named if bad.line <= l < bad.line + len(bad.code)}
in_good = {l for l in named if good.line <= l < good.line + len(good.code)}
problems = []
if p.returncode == 0:
    problems.append("the page compiled, but its second block must not")
if expect not in out:
    problems.append(f"the compiler's output lacks the expected text: {expect}")
if not in_bad:
    problems.append(f"no error names a line of the broken block ({page}:{bad.line}-{bad.line + len(bad.code) - 1})")
if in_good:
    problems.append(f"an error names the good block's line(s) {sorted(in_good)}")
if problems:
    print("\n".join(out.splitlines()[:40]))
    sys.exit("check_broken.py: " + "; ".join(problems))
print(f"{page}: refused as it must be: '{expect}' at line(s) {sorted(in_bad)} of the broken block")
