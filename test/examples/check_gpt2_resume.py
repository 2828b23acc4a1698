#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Nothing lost when a rank dies (issue #26).

    check_gpt2_resume.py SCENARIO GPT2 INTEROP MPIRUN [MPIRUN_ARGS...]

SCENARIO tp: trains examples/gpt2 (double, a small model) for STEPS steps
straight on 3 ranks (speeds 1,2,3), saving at the end. Then the same run
again with --save-every 2, and as soon as its first checkpoint is on disk one
of its ranks gets SIGKILL: the job must end (mpirun takes the others down)
within a deadline. It resumes from the last checkpoint on 2 ranks (speeds
2,1: other lengths) and runs to STEPS; the weights, both AdamW moments and the
metadata (step, data position, seed) must equal the straight run's within
1e-12. Both runs sample a continuation after training (--generate at
temperature 1): the straight run's and the killed run's --seed 7 is saved in
the checkpoint, and the resumed run, given no --seed, must sample the same
text with it.

SCENARIO mesh: data parallelism is the same training. The straight run is on
2 ranks (speeds 1,2); a run on a 2 x 2 mesh (--mesh 2x2: two dp groups, each
of 2 ranks at speeds 1,2) must end with its weights and moments (1e-12); the
mesh run is killed as above and resumed on a 3 x 1 mesh (three dp groups of
one rank), which must end with them too.
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
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="backslashreplace",
                       timeout=600)
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


# The runs of each scenario: (ranks, flags) of the straight run, of other
# straight runs that must end alike, of the killed run, of the resumed run.
SCENARIOS = {
    "tp": {"straight": ("3", ["--speeds", "1,2,3"]), "alike": [],
           "killed": ("3", ["--speeds", "1,2,3"]), "resumed": ("2", ["--speeds", "2,1"])},
    "mesh": {"straight": ("2", ["--speeds", "1,2"]), "alike": [("4", ["--mesh", "2x2", "--speeds", "1,2"])],
             "killed": ("4", ["--mesh", "2x2", "--speeds", "1,2"]), "resumed": ("3", ["--mesh", "3x1"])},
}


# The tp scenario's sample: the seed given to the straight and killed runs, and
# the sampling flags every run of it gets.
SEED = ["--seed", "7"]
SAMPLE = ["--generate", "ab", "--tokens", "12", "--temperature", "1"]


def sample(out):
    """The text --generate printed: from its header to the loss summary."""
    start = out.find("generated (")
    return out[start:out.find("mean loss of the first", start)] if start >= 0 else None


def compare(mpirun, args, interop, a, b):
    run([mpirun] + args + ["-n", "2", interop, "compare", os.path.join(a, "model.safetensors"),
                           os.path.join(b, "model.safetensors"), "1e-12"])


def main():
    scenario, gpt2, interop, mpirun, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
    runs = SCENARIOS[scenario]
    seed, sampling = (SEED, SAMPLE) if scenario == "tp" else ([], [])
    with tempfile.TemporaryDirectory() as d:
        straight, killed, resumed = (os.path.join(d, n) for n in ("straight", "killed", "resumed"))
        n, flags = runs["straight"]
        straight_out = run([mpirun] + args + ["-n", n, gpt2, "--save", straight] + flags + MODEL + seed + sampling)
        for i, (n, flags) in enumerate(runs["alike"]):
            alike = os.path.join(d, f"alike{i}")
            run([mpirun] + args + ["-n", n, gpt2, "--save", alike] + flags + MODEL)
            compare(mpirun, args, interop, straight, alike)

        n, flags = runs["killed"]
        job = subprocess.Popen([mpirun] + args + ["-n", n, gpt2, "--save", killed, "--save-every", "2"] + flags + MODEL + seed,
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

        n, flags = runs["resumed"]
        out = run([mpirun] + args + ["-n", n, gpt2, "--resume", killed, "--save", resumed] + flags + MODEL + sampling)
        if f"at step {step}" not in out:
            sys.exit(f"check_gpt2_resume: the resumed run did not say it resumed at step {step}")
        if sampling:
            if sample(straight_out) is None or sample(out) != sample(straight_out):
                sys.exit("check_gpt2_resume: the resumed run sampled another text than the straight run "
                         f"(its saved seed not used?):\n{sample(straight_out)!r}\n{sample(out)!r}")
            print("the resumed run sampled the straight run's text with the saved seed: " + repr(sample(out)))
        compare(mpirun, args, interop, straight, resumed)
    print(f"gpt2 resume ({scenario}): killed at step {step} ({' '.join(runs['killed'][1])} on {runs['killed'][0]} "
          f"ranks), resumed with {' '.join(runs['resumed'][1])} on {runs['resumed'][0]}; it and "
          f"{len(runs['alike'])} other straight runs end with the same weights and moments as {STEPS} steps "
          f"straight ({' '.join(runs['straight'][1])} on {runs['straight'][0]} ranks; 1e-12)")


if __name__ == "__main__":
    main()
