# SPDX-License-Identifier: MIT
"""What check_log.py and check_trace.py share: their verdict on a file, then
drawing it with one of the scripts/plot_*.py scripts. The plot is part of the
test: without matplotlib the test says SKIP (77), never OK."""
import os
import struct
import subprocess
import sys

SKIP = 77  # Meson's exit code for a skipped test

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_problem(png):
    """Why PNG is not a drawn plot, or None: it must exist, start with the PNG
    signature and an IHDR chunk of a plausible figure (100 to 10000 pixels a
    side), and hold 10 kB to 20 MB (measured: a blank 800 x 650 figure is
    3.6 kB; the plots of check_log and check_trace are 47 kB and 21 kB)."""
    if not os.path.exists(png):
        return f"{png} was not written"
    size = os.path.getsize(png)
    with open(png, "rb") as f:
        head = f.read(24)
    if head[:8] != PNG_SIGNATURE:
        return f"{png} does not start with the PNG signature (first bytes {head[:8]!r})"
    if head[12:16] != b"IHDR":
        return f"{png} has no IHDR chunk first"
    width, height = struct.unpack(">II", head[16:24])
    if not (100 <= width <= 10000 and 100 <= height <= 10000):
        return f"{png} is {width} x {height} pixels"
    if not 10_000 <= size <= 20_000_000:
        return f"{png} is {size} bytes, outside 10 kB .. 20 MB"
    return None


def draw(plot_script, data, tmp):
    """Runs PLOT_SCRIPT DATA -o TMP/run.png with this Python (the one Meson was
    configured with, -Dpython) and checks the PNG (png_problem). Prints the
    result; returns 0 (drawn), 1 (the script failed, or the PNG is not a plot)
    or 77 (SKIP: matplotlib is not installed for this Python)."""
    if subprocess.run([sys.executable, "-c", "import matplotlib"], capture_output=True).returncode != 0:
        print(f"SKIP plot: matplotlib is not installed for {sys.executable} (Debian: apt-get install python3-matplotlib)")
        return SKIP
    png = os.path.join(tmp, "run.png")
    p = subprocess.run([sys.executable, plot_script, data, "-o", png], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        print(f"FAIL plot: {plot_script} exited {p.returncode}\n{p.stderr[-2000:]}")
        return 1
    problem = png_problem(png)
    if problem:
        print(f"FAIL plot: {problem}")
        return 1
    with open(png, "rb") as f:
        width, height = struct.unpack(">II", f.read(24)[16:24])
    print(f"ok   plot: a {width} x {height} PNG of {os.path.getsize(png)} bytes")
    return 0


def verdict_then_draw(what, problems, ok_line, plot_script, data, tmp):
    """Prints the problems found in DATA (FAIL, at most 10) and returns 1, or
    prints OK_LINE and draws DATA (see draw: 0, 1 or 77)."""
    for p in problems[:10]:
        print(f"FAIL {what}:", p)
    if problems:
        return 1
    print(f"ok   {what}: {ok_line}")
    return draw(plot_script, data, tmp)
