#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs a command that must fail in one particular way: its exit code must be
CODE and its output (stdout and stderr together) must hold PHRASE exactly once
(printed by one rank, not by each). CODE is a number or a name of the
exit_code enum of examples/support/command_line.hpp (usage, diverged,
refused, ...), read from that header, so that the codes are written down in
one place. A test that expects, say, a diverged loss then fails on a renamed
flag (usage, 64) or any other error (1) instead of passing.

    expect_exit.py CODE PHRASE COMMAND [ARGS...]
"""
import os
import re
import subprocess
import sys

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "support", "command_line.hpp")


def exit_codes(header=HEADER):
    """The enumerators of `enum class exit_code` in HEADER: {name: value}."""
    text = open(header).read()
    body = re.search(r"enum class exit_code\s*:\s*int\s*\{(.*?)\};", text, re.S)
    if not body:
        raise SystemExit(f"expect_exit.py: no 'enum class exit_code' in {header}")
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*(\w+)\s*=\s*(\d+)\s*,", body.group(1), re.M)}


def expected_code(given, codes):
    if given.isdigit():
        return int(given)
    if given not in codes:
        raise SystemExit(f"expect_exit.py: no exit code named '{given}' in {HEADER} (there are {', '.join(codes)})")
    return codes[given]


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    code = expected_code(sys.argv[1], exit_codes())
    phrase, cmd = sys.argv[2], sys.argv[3:]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = r.stdout + r.stderr
    problems = []
    if r.returncode != code:
        problems.append(f"exit code {r.returncode}, expected {code} ({sys.argv[1]})")
    if out.count(phrase) != 1:
        problems.append(f"'{phrase}' printed {out.count(phrase)} times, expected once")
    if problems:
        print("FAIL", "; ".join(problems))
        print("the command:", " ".join(cmd))
        print("its output (last 40 lines):")
        print("\n".join(out.splitlines()[-40:]))
        return 1
    print(f"ok   exit code {code} ({sys.argv[1]}) and '{phrase}' once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
