#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every ```cpp block of the pages is in the docs program, and nothing else is.

usage: check_count.py SRC_ROOT DOCS_BLOCKS [DOCS_BLOCKS_GPU]

It also checks that a block marked `same-as=PATH` is a verbatim part of that file.

Without DOCS_BLOCKS_GPU (a build without the GPU backend) the blocks that include
<shardex/cuda.hpp> are not compiled; the count says so.
"""
import os, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import extract_blocks

root, exe = sys.argv[1], sys.argv[-1]
with_gpu = len(sys.argv) > 3
blocks = extract_blocks.scan(root)
expected = {b.id: b.kind for b in blocks if with_gpu or not b.gpu}
listed = dict(l.split(" ", 1) for l in subprocess.run([exe, "--list"], capture_output=True, text=True,
                                                       check=True).stdout.split("\n") if l)
missing = sorted(set(expected) - set(listed))
extra = sorted(set(listed) - set(expected))
wrong = sorted(i for i in set(expected) & set(listed) if expected[i] != listed[i])
for i in missing:
    print(f"{i}: on the page but not in {exe} (rebuild it)")
for i in extra:
    print(f"{i}: in {exe} but no longer on the page (rebuild it)")
for i in wrong:
    print(f"{i}: a {expected[i]} on the page, a {listed[i]} in {exe}")
differs = []
for b in blocks:
    if b.same_as:
        path = os.path.join(root, b.same_as)
        text = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if text is None or "\n".join(b.code) + "\n" not in text:
            differs.append(b.id)
            print(f"{b.id}: the block is not a verbatim part of {b.same_as} (update the page or the file)")
if missing or extra or wrong or differs or not expected:
    sys.exit(1)
kinds = {k: sum(1 for v in expected.values() if v == k) for k in ("program", "fragment", "declarations")}
runs = sum(1 for b in blocks if b.output is not None and (with_gpu or not b.gpu))
n_pages = len({b.page for b in blocks})
gpu_left = sum(1 for b in blocks if b.gpu and not with_gpu)
print(f"docs: {len(expected)} C++ blocks of {n_pages} pages compiled ({kinds['program']} programs, "
      f"{kinds['fragment']} fragments, {kinds['declarations']} declarations); {runs} run with their output compared")
if gpu_left:
    print(f"docs: {gpu_left} GPU block(s) not compiled: this build has no GPU backend")
