#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The command lines of the examples and bench programs (their parsing is
examples/support/command_line.hpp, through CLI11):

1. every row of bad_inputs.tsv, run against each program it names: the run
   must end at parsing with the row's exit code (a name of the exit_code enum
   of that header), print the row's phrase exactly once (rank 0 alone, at 2
   ranks) and nothing on stdout (no work started);
2. each program's --help at 2 ranks: exit code 0, printed once, and exactly
   the text docs/guides/command-lines.md shows for it;
3. the bad-input table of that page is bad_inputs.tsv, row for row, and its
   table of exit codes is the enum of the header.

    check_flags.py TABLE DOC [--mpirun MPIRUN [MPIRUN_ARGS...]] --programs NAME PATH [NAME PATH ...]

Without --mpirun (a build without MPI) every run is one process, and the rows
at 2 ranks are left out. A program the build does not have (bench_gpu_vs_host
without the GPU backend) is not given, and its rows are left out, said so.
"""
import concurrent.futures
import os
import re
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import expect_exit  # noqa: E402  (the exit codes, read from the header)

GROUPS = {
    "training": ["megatron_mlp", "sequence_parallel_mlp", "alltoall_attention", "dp_tp_mlp"],
    "examples": ["megatron_mlp", "sequence_parallel_mlp", "alltoall_attention", "dp_tp_mlp", "reference_collectives", "gpt2"],
    "bench": ["bench_collectives", "bench_mlp_step", "bench_checkpoint", "bench_gpu_vs_host", "bench_gpt2_step"],
}
GROUPS["all"] = GROUPS["examples"] + GROUPS["bench"]
COLUMNS = ["programs", "ranks", "arguments", "exit code", "the message holds"]


def read_table(path):
    """The rows of bad_inputs.tsv: (programs, ranks, arguments, exit code name, phrase)."""
    rows = []
    for n, line in enumerate(open(path), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.rstrip("\n").split("\t")
        if len(cells) != len(COLUMNS):
            raise SystemExit(f"{path}:{n}: {len(cells)} cells, not {len(COLUMNS)} ({', '.join(COLUMNS)})")
        rows.append(tuple(cells))
    return rows


def doc_table(text, columns=COLUMNS):
    """The rows of the page's table whose header is `columns` (cells unquoted from `...`, \\| unescaped)."""
    rows, inside = [], False
    for line in text.splitlines():
        if not line.startswith("|"):
            inside = False
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        cells = [c[1:-1] if len(c) >= 2 and c[0] == "`" and c[-1] == "`" else c for c in cells]
        if cells == columns:
            inside = True
        elif inside and not all(set(c) <= set("-: ") for c in cells):
            rows.append(tuple("" if c == "(none)" else c for c in cells))
    return rows


def doc_help(text, name):
    """The ```text block of the page that holds `Usage: NAME [OPTIONS]`, or None."""
    for block in re.findall(r"```text\n(.*?)```", text, re.S):
        if f"Usage: {name} [OPTIONS]" in block:
            return block
    return None


def runner(mpirun):
    def run(path, ranks, args):
        cmd = (mpirun + ["-n", str(ranks)] if mpirun and ranks > 1 else []) + [path] + args
        with tempfile.TemporaryDirectory() as tmp:
            # One rank runs the program alone, as an Open MPI singleton that starts no server (a third
            # faster); isolated singletons share one session directory name, so each gets its own base.
            alone = dict(os.environ, OMPI_MCA_ess_singleton_isolated="1", OMPI_MCA_orte_tmpdir_base=tmp)
            try:
                r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120,
                                   env=None if ranks > 1 else alone)
                return r.returncode, r.stdout, r.stderr
            except subprocess.TimeoutExpired:
                return None, "", "timed out after 120 s (did it start working instead of refusing the flags?)"

    return run


def main():
    argv = sys.argv[1:]
    if len(argv) < 3 or "--programs" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    table, doc = argv[0], argv[1]
    mpirun = argv[argv.index("--mpirun") + 1:argv.index("--programs")] if "--mpirun" in argv else []
    rest = argv[argv.index("--programs") + 1:]
    programs = dict(zip(rest[0::2], rest[1::2]))
    codes = expect_exit.exit_codes()
    run = runner(mpirun)
    text = open(doc).read()
    rows = read_table(table)
    problems, skipped = [], set()

    # 3. The page shows the same table, and the exit codes of the header.
    shown_codes = {r[1]: int(r[0]) for r in doc_table(text, ["exit code", "name", "meaning"])}
    if shown_codes != codes:
        problems.append(f"{doc}: its exit codes {shown_codes} are not those of the header {codes}")
    shown = doc_table(text)
    if shown != rows:
        problems.append(f"{doc}: its table ({len(shown)} rows) is not {table} ({len(rows)} rows); first difference: " +
                        next((f"{a} != {b}" for a, b in zip(shown, rows) if a != b), "in the number of rows"))

    # 1. The bad inputs, and 2. --help, in parallel (most of a run is MPI's start and, after a failure, mpirun's teardown).
    jobs = []
    for programs_cell, ranks, arguments, code_name, phrase in rows:
        if code_name not in codes:
            problems.append(f"{table}: no exit code named '{code_name}' in the header (there are {', '.join(codes)})")
            continue
        if int(ranks) > 1 and not mpirun:
            continue
        names = []
        for item in programs_cell.split(","):
            names += GROUPS.get(item.strip(), [item.strip()])
        for name in names:
            if name not in programs:
                skipped.add(name)
                continue
            jobs.append(("bad", name, int(ranks), shlex.split(arguments), codes[code_name], code_name, phrase))
    for name in programs:
        jobs.append(("help", name, 2 if mpirun else 1, ["--help"], 0, "ok", f"Usage: {name} [OPTIONS]"))

    def check(job):
        kind, name, ranks, args, code, code_name, phrase = job
        rc, out, err = run(programs[name], ranks, args)
        what = f"{name} {shlex.join(args)} at {ranks} rank{'s' if ranks > 1 else ''}"
        bad = []
        if rc != code:
            bad.append(f"exit code {rc}, expected {code} ({code_name})")
        if (out + err).count(phrase) != 1:
            bad.append(f"'{phrase}' printed {(out + err).count(phrase)} times, expected once")
        if kind == "bad" and out:
            bad.append(f"it printed on stdout (work started?): {out.splitlines()[0]!r}")
        if kind == "help":
            want = doc_help(text, name)
            if want is None:
                bad.append(f"{doc} shows no --help of {name} (a ```text block with 'Usage: {name} [OPTIONS]')")
            elif out.rstrip() != want.rstrip():
                bad.append(f"--help differs from {doc}'s block; it prints:\n{out}")
        return what, bad, err

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for what, bad, err in pool.map(check, jobs):
            if bad:
                problems.append(f"{what}: " + "; ".join(bad) + ("\n  stderr: " + err.strip()[:600] if err.strip() else ""))
            else:
                print(f"ok   {what}")
    for name in sorted(skipped):
        print(f"skip {name}: not built here, its rows left out")
    for p in problems:
        print("FAIL", p)
    if problems:
        return 1
    print(f"ok   {len(jobs)} runs of {len(programs)} programs, {len(rows)} rows, the page's table and --help texts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
