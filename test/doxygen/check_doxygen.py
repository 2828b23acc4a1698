#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs doxygen on docs/api/Doxyfile (as `meson compile docs` does) and fails
on any warning it reports: a public name without a comment, or a comment
doxygen cannot read. Prints every warning.

usage: check_doxygen.py DOXYGEN DOXYFILE OUTDIR [--input DIR]
                        [--expect-undocumented NAME]

DOXYGEN is '' where Meson found none: SKIP (77). OUTDIR receives the HTML and
the warning log. --input replaces the Doxyfile's INPUT (the fixture's header
folder). --expect-undocumented NAME: the fixture's run, which must fail (exit
1) because of NAME alone; a warning about anything else, or none about NAME,
is an error of the check itself (99), so that Meson's should_fail cannot pass
on a failure of another kind.
Exit codes: 0 no warning, 1 warnings, 77 no doxygen, 99 doxygen itself failed
or the fixture failed for another reason.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time


def read_warnings(log):
    """The log's warnings, one entry each (a warning's continuation lines,
    indented or without a `file:line:` head, are kept with it)."""
    entries = []
    with open(log, encoding='utf-8', errors='replace') as f:
        for line in f:
            line = line.rstrip('\n')
            if not line.strip():
                continue
            if 'warning:' in line or 'error:' in line or not entries:
                entries.append(line)
            else:
                entries[-1] += '\n' + line
    return entries


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('doxygen')
    ap.add_argument('doxyfile')
    ap.add_argument('outdir')
    ap.add_argument('--input')
    ap.add_argument('--expect-undocumented')
    a = ap.parse_args()
    if not a.doxygen:
        print('SKIP: doxygen not found when the build was configured (Debian: apt-get install doxygen)')
        return 77

    out = os.path.abspath(a.outdir)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    log = os.path.join(out, 'doxygen-warnings.log')
    with open(a.doxyfile, encoding='utf-8') as f:
        config = f.read()
    # Later assignments win: the same configuration, written elsewhere.
    config += f'\nOUTPUT_DIRECTORY = "{out}"\nWARN_LOGFILE = "{log}"\n'
    if a.input:
        src = os.path.abspath(a.input)
        config += f'INPUT = "{src}"\nSTRIP_FROM_PATH = "{src}"\nSTRIP_FROM_INC_PATH = "{src}"\nINCLUDE_PATH = "{src}"\n'
    start = time.monotonic()
    r = subprocess.run([a.doxygen, '-'], input=config, text=True, capture_output=True)
    took = time.monotonic() - start
    if r.returncode != 0 or not os.path.exists(log):
        print(f'check_doxygen: doxygen ({a.doxygen}) exited {r.returncode} on {a.doxyfile}:')
        print(r.stdout + r.stderr)
        return 99
    if not os.path.exists(os.path.join(out, 'html', 'index.html')):
        print(f'check_doxygen: doxygen wrote no {out}/html/index.html')
        return 99

    warnings = read_warnings(log)
    undocumented = [w for w in warnings if 'is not documented' in w]
    for w in warnings:
        print(w)
    print(f'check_doxygen: doxygen took {took:.1f} s; {len(warnings)} warning(s), '
          f'{len(undocumented)} of them undocumented public names; HTML in {out}/html')

    if a.expect_undocumented:
        name = a.expect_undocumented
        named = re.compile(r'\b' + re.escape(name) + r'\b')
        others = [w for w in warnings if not ('is not documented' in w and named.search(w))]
        if warnings and (others or not undocumented):
            print(f'check_doxygen: the fixture must fail only because {name} is undocumented; '
                  f'{len(others)} other warning(s) above')
            return 99
        if not warnings:
            print(f'check_doxygen: no warning about the undocumented {name}: the check cannot fail')
            return 0
        print(f'check_doxygen: refused, as it must be: {name} has no comment')
        return 1
    return 1 if warnings else 0


if __name__ == '__main__':
    sys.exit(main())
