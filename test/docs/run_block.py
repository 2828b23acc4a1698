#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run one block of a page and compare its output with the output the page shows.

usage: run_block.py DOCS_BLOCKS SRC_ROOT BLOCK_ID [MPIRUN [MPIRUN_ARGS...]]

BLOCK_ID is PAGE:LINE (extract_blocks.py --runs lists them). The block runs on the
number of ranks its `<!-- output of the block above np=N -->` marker names (2 by
default); without MPIRUN it runs directly (one rank). Both texts are compared line by
line after the marker's mask (a regular expression) replaces what varies by "#".
"""
import os, re, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import extract_blocks

exe, root, block_id = sys.argv[1], sys.argv[2], sys.argv[3]
mpirun = sys.argv[4:]
page = block_id.rsplit(":", 1)[0]
blocks = [b for b in extract_blocks.parse(root, page) if b.id == block_id]
if not blocks or blocks[0].output is None:
    sys.exit(f"run_block.py: {block_id} is not a block with a shown output (the page changed: reconfigure)")
b = blocks[0]
cmd = (mpirun + ["-n", str(b.np)] if mpirun else []) + [exe, block_id]
p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
if p.returncode != 0:
    sys.stdout.write(p.stdout)
    sys.stdout.write(p.stderr)
    sys.exit(f"run_block.py: {block_id} exited with {p.returncode}: {' '.join(cmd)}")


def lines(text_lines):
    out = [l.rstrip() for l in text_lines]
    if out and out[0].startswith("$ "):
        out = out[1:]
    while out and not out[-1]:
        out.pop()
    return [re.sub(b.mask, "#", l) if b.mask else l for l in out]


want, got = lines(b.output), lines(p.stdout.split("\n"))
if want != got:
    print(f"{block_id}: the output differs from the page's (mask: {b.mask!r})")
    print("--- the page shows:")
    print("\n".join(want))
    print("--- the block printed:")
    print("\n".join(got))
    sys.exit(1)
print(f"{block_id}: {len(got)} lines as the page shows, on {b.np} rank(s)")
