"""What check_log.py and check_trace.py share: their verdict on a file, then
drawing it with one of the scripts/plot_*.py scripts where matplotlib is installed."""
import os
import subprocess
import sys


def draw(plot_script, data, tmp):
    """Runs PLOT_SCRIPT DATA -o TMP/run.png with a python that has matplotlib
    (Debian's is for the system python; one from PATH may lack it). Prints the
    result; returns the exit code: 0 (drawn, or skipped without matplotlib),
    1 (an empty-looking PNG)."""
    for py in ("/usr/bin/python3", sys.executable):
        if os.path.exists(py) and subprocess.run([py, "-c", "import matplotlib"], capture_output=True).returncode == 0:
            png = os.path.join(tmp, "run.png")
            subprocess.run([py, plot_script, data, "-o", png], check=True, stdout=subprocess.DEVNULL)
            size = os.path.getsize(png)
            if size < 10000:
                print(f"FAIL plot: {png} is only {size} bytes")
                return 1
            print(f"ok   plot: {size} bytes of PNG")
            return 0
    print("SKIP plot: matplotlib is not installed (Debian: python3-matplotlib)")
    return 0


def verdict_then_draw(what, problems, ok_line, plot_script, data, tmp):
    """Prints the problems found in DATA (FAIL, at most 10) and returns 1, or
    prints OK_LINE and draws DATA (see draw)."""
    for p in problems[:10]:
        print(f"FAIL {what}:", p)
    if problems:
        return 1
    print(f"ok   {what}: {ok_line}")
    return draw(plot_script, data, tmp)
