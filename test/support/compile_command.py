# SPDX-License-Identifier: MIT
"""The compile command Meson wrote for a source into BUILD/compile_commands.json,
for the scripts that compile a source again with the real build's flags
(test/fail/run_cases.py, test/vectorize/check_vectorized.py, bench/compile_time.py):
its arguments without the output, the dependency file and -c, which each adds
as it needs."""
import json, os, shlex


def find(build, source):
    """The compile_commands.json entry of `source` in `build`, or None."""
    source = os.path.realpath(source)
    with open(os.path.join(build, "compile_commands.json")) as f:
        for e in json.load(f):
            if os.path.realpath(os.path.join(e["directory"], e["file"])) == source:
                return e
    return None


def arguments(entry, drop=lambda arg: False):
    """The entry's arguments less a ccache launcher, -o, -MF, -MQ, -MT (each with its
    value), -MD and -c, and less each argument for which drop(arg) is true."""
    out, skip = [], False
    for a in shlex.split(entry["command"]):
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MQ", "-MT"):
            skip = True
            continue
        if a in ("-MD", "-c") or drop(a):
            continue
        out.append(a)
    if out and os.path.basename(out[0]) == "ccache":  # the compiler itself: nothing to cache here
        out = out[1:]
    return out
