#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Nothing lost when a rank dies (issue #26).

    check_gpt2_resume.py GPT2 INTEROP MPIRUN [MPIRUN_ARGS...]

Trains examples/gpt2 (double, a small model) for STEPS steps straight on 3
ranks (speeds 1,2,3), saving at the end. Then the same run again with
--save-every 2, and as soon as its first checkpoint is on disk one of its ranks
gets SIGKILL: the job must end (mpirun takes the others down) within a
deadline. It resumes from the last checkpoint on 2 ranks (speeds 2,1: other
lengths) and runs to STEPS; the weights, both AdamW moments and the metadata
(step, data position, seed) must equal the straight run's within 1e-12.
"""
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time

STEPS = 40
DEADLINE_S = 60  # from the kill to the end of the job
MODEL = ["--dtype", "double", "--layers", "2", "--heads", "3", "--width", "24", "--context", "32",
         "--batch", "4", "--seq", "32", "--eval-every", "0", "--steps", str(STEPS), "--warmup", "4"]


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    print("$ " + " ".join(cmd[-14:]) + "\n" + "\n".join(p.stdout.splitlines()[-3:]))
    if p.returncode != 0:
        print(p.stdout)
        sys.exit(f"check_gpt2_resume: exit code {p.returncode}")
    return p.stdout


def saved_step(path):
    """The step in a checkpoint's metadata, or None while there is none."""
    try:
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            meta = json.loads(f.read(n)).get("__metadata__", {})
        return int(meta["shardex.step"])
    except (OSError, ValueError, KeyError, struct.error):
        return None


def rank_pids(tag):
    """The pids of the gpt2 processes whose command line holds `tag` (not mpirun's)."""
    out = subprocess.run(["pgrep", "-f", tag], stdout=subprocess.PIPE, text=True).stdout.split()
    pids = []
    for pid in out:
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "gpt2":
                    pids.append(int(pid))
        except OSError:
            pass
    return pids


def main():
    gpt2, interop, mpirun, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    with tempfile.TemporaryDirectory() as d:
        straight, killed, resumed = (os.path.join(d, n) for n in ("straight", "killed", "resumed"))
        run([mpirun] + args + ["-n", "3", gpt2, "--speeds", "1,2,3", "--save", straight] + MODEL)

        job = subprocess.Popen([mpirun] + args + ["-n", "3", gpt2, "--speeds", "1,2,3", "--save", killed,
                                                  "--save-every", "2"] + MODEL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        weights = os.path.join(killed, "model.safetensors")
        start = time.monotonic()
        while saved_step(weights) is None and job.poll() is None and time.monotonic() - start < 300:
            time.sleep(0.01)
        pids = rank_pids(killed)
        if job.poll() is not None or not pids:
            print(job.communicate()[0])
            sys.exit("check_gpt2_resume: the run ended before a rank could be killed")
        victim = pids[len(pids) // 2]
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        try:
            out = job.communicate(timeout=DEADLINE_S)[0]
        except subprocess.TimeoutExpired:
            job.kill()
            sys.exit(f"check_gpt2_resume: the job still ran {DEADLINE_S} s after a rank was killed (a hang)")
        print(f"killed rank pid {victim}: the job ended in {time.monotonic() - killed_at:.1f} s "
              f"with exit code {job.returncode}")
        if job.returncode == 0:
            print(out)
            sys.exit("check_gpt2_resume: the killed job exited 0")
        step = saved_step(weights)
        if step is None or not 0 < step < STEPS:
            sys.exit(f"check_gpt2_resume: the last checkpoint is at step {step}, not inside the run")
        print(f"the last checkpoint: step {step} of {STEPS}")

        out = run([mpirun] + args + ["-n", "2", gpt2, "--speeds", "2,1", "--resume", killed, "--save", resumed] + MODEL)
        if f"at step {step}" not in out:
            sys.exit(f"check_gpt2_resume: the resumed run did not say it resumed at step {step}")
        run([mpirun] + args + ["-n", "2", interop, "compare", os.path.join(straight, "model.safetensors"),
                               os.path.join(resumed, "model.safetensors"), "1e-12"])
    print(f"gpt2 resume: killed at step {step} on 3 ranks, resumed on 2, "
          f"the same weights and moments as {STEPS} steps straight (1e-12)")


if __name__ == "__main__":
    main()
