#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The faults suite: runs each case of fault_cases.cpp under mpirun with a
short watchdog deadline and checks that the job ends with a non-zero exit (the
exact one where mpirun's is known: a killed rank) and a clear message within
the deadline plus 5 s, instead of hanging.

    run_faults.py FAULT_CASES_EXE MPIRUN [MPIRUN_ARGS...]

Environment: SHARDEX_FAULT_TIMEOUT (the deadline in seconds, default 4),
SHARDEX_FAULT_CASES (a comma-separated subset).
"""
import os
import re
import subprocess
import sys
import time

# case -> (ranks, a pattern the job's output must contain[, the exact exit code])
CASES = {
    # The peers wait in the agreement; rank 1 waits in MPI_Finalize: watchdogs.
    "early_return": (3, r"watchdog: .*(MPI_Allreduce \(the cross-rank agreement|MPI_Finalize)"),
    "caught_error": (3, r"watchdog: .*(MPI_Allreduce \(the cross-rank agreement|MPI_Finalize)"),
    # Rank 0's backward agreement meets the others' all_gather agreement: the
    # mismatch is reported, then the ranks are out of step until a watchdog.
    "backward_on_one_rank": (3, r"watchdog: |do not agree|differ"),
    "check_level_differs": (3, r"watchdog: "),
    # Open MPI (4.1) ends the job when a rank dies or leaves without
    # MPI_Finalize, naming that rank; a rank killed by signal 9 makes mpirun
    # exit 137 (128 + 9), one that leaves without finalizing exit 1.
    "sigkill": (3, r"mpirun noticed that process rank 1 with PID \d+ on node \S+ exited on signal 9 \(Killed\)", 137),
    "exit_without_finalize": (3, r"mpirun has exited due to process rank 1 with PID \d+ on\s+node \S+ exiting improperly", 1),
    "unwinding": (3, r"an exception propagates; aborting the job"),
}

# The bad inputs: case -> a pattern every rank's "[rank r] error: ..." line must contain.
EVERY_RANK = {
    "zeros_negative_then_all_reduce": r"shardex::Tensor::zeros on rank 0 of 3 \(layout P\(sum\), global shape \(-1, 5\)\): extent -1 of dim 0 is negative",
    "ones_negative": r"shardex::Tensor::full.*extent -1 of dim 0 is negative",
    "sharded_negative_all_gather": r"shardex::Tensor::full.*extent -2 of dim 0 is negative",
    "default_constructed": r"shardex::all_reduce.*the tensor is empty \(default-constructed or moved-from\)",
    "moved_from": r"the tensor is empty \(default-constructed or moved-from\)",
    "shape_overflows": r"overflows 64 bits",
    "too_large_for_mpi": r"on rank 2 of 3 .*more than one call of the backend can move",
    "group_fails_part_way": r"MPI_Isend failed",
    "zeros_lengths_on_one_rank": r"shardex::Tensor::zeros on rank 1 of 3.*the lengths sum to 4",
    "slice_lengths_on_one_rank": r"slice on rank 1 of 3.*the lengths sum to 4",
}
for _name, _pattern in EVERY_RANK.items():
    CASES[_name] = (3, _pattern)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    exe, mpirun, mpirun_args = sys.argv[1], sys.argv[2], sys.argv[3:]
    deadline = float(os.environ.get("SHARDEX_FAULT_TIMEOUT", "4"))
    only = [c for c in os.environ.get("SHARDEX_FAULT_CASES", "").split(",") if c]
    env = dict(os.environ, SHARDEX_TIMEOUT=str(deadline))
    failed = []
    for name, (ranks, pattern, *exact) in CASES.items():
        if only and name not in only:
            continue
        cmd = [mpirun] + mpirun_args + ["-n", str(ranks), exe, name]
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=deadline + 60)
            out, rc = p.stdout, p.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), None
        took = time.monotonic() - t0
        problems = []
        if rc is None:
            problems.append(f"still running after {deadline + 60:.0f} s: it hangs")
        elif rc == 0:
            problems.append("exit code 0: the fault went unnoticed")
        elif exact and rc != exact[0]:
            problems.append(f"exit code {rc}, not {exact[0]}")
        if took > deadline + 5:
            problems.append(f"took {took:.1f} s, more than the deadline ({deadline:g} s) plus 5 s")
        if not re.search(pattern, out):
            problems.append(f"no message matching /{pattern}/ in its output")
        if name in EVERY_RANK:
            errs = {int(m.group(1)) for m in re.finditer(r"\[rank (\d+)\] error: (.*)", out) if re.search(pattern, m.group(2))}
            if errs != set(range(ranks)):
                problems.append(f"the error was printed by ranks {sorted(errs)}, not by every one of the {ranks}")
        status = "FAIL" if problems else "ok"
        print(f"{status:4} {name:22} {ranks} ranks, exit {rc}, {took:.1f} s")
        first = next((l for l in out.splitlines() if "[shardex]" in l or "error" in l.lower()), "")
        if first:
            print(f"     {first[:300]}")
        for pr in problems:
            print(f"     {pr}")
        if problems:
            print("     --- output ---\n" + "\n".join("     " + l for l in out.splitlines()[-30:]))
            failed.append(name)
    if failed:
        print(f"faults: {len(failed)} case(s) failed: {', '.join(failed)}")
        return 1
    print("faults: every case ended with a message and a non-zero exit within the deadline plus 5 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
