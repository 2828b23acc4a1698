#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Resume at another world size (issue #14).

    check_resume.py MEGATRON_MLP DP_TP_MLP INTEROP MPIRUN [MPIRUN_ARGS...]

Trains the Megatron MLP with Adam for 10 steps straight on 4 ranks (speeds
1,2,3,4), and for 5 steps on 4 ranks, saving, then 5 more resumed on 3 ranks
(speeds 2,0,1: other lengths, one of them zero); both save. The two files
(parameters and both Adam moments) must agree within 1e-12 (test/io/interop.cpp
compare: each tensor's largest difference over its largest element; first
checked to refuse a value off by 3e-9, a NaN and an infinity). The same for
dp_tp_mlp (SGD): 10 steps on a 2 x 2 mesh against 5 on 2 x 2, resumed for 5 on
a 1 x 3 mesh.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print("$ " + " ".join(cmd[-12:]) + "\n" + "\n".join(p.stdout.splitlines()[-3:]))
    if p.returncode != 0:
        print(p.stdout)
        sys.exit(1)


def write_f64(path, values):
    """A safetensors file of one F64 tensor "w" holding VALUES (written by hand: no package needed)."""
    header = json.dumps({"w": {"dtype": "F64", "shape": [len(values)], "data_offsets": [0, 8 * len(values)]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + struct.pack(f"<{len(values)}d", *values))


def judge_refuses(mpirun, args, interop, d):
    """interop compare, the judge above, must say DIFFERENT (exit 1) for a
    value off by 3e-9 (1e-9 of the tensor's scale), a NaN and an infinity, and
    same (exit 0) for equal files."""
    base = os.path.join(d, "base.safetensors")
    write_f64(base, [1.0, -2.0, 3.0])
    for name, values, want in [("equal", [1.0, -2.0, 3.0], 0), ("off by 3e-9", [1.0, -2.0, 3.0 + 3e-9], 1),
                               ("a NaN", [float("nan"), -2.0, 3.0], 1), ("an infinity", [1.0, float("inf"), 3.0], 1)]:
        other = os.path.join(d, "other.safetensors")
        write_f64(other, values)
        p = subprocess.run([mpirun] + args + ["-n", "2", interop, "compare", other, base, "1e-12"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print(f"{'ok  ' if p.returncode == want else 'FAIL'} compare with {name}: exit {p.returncode} (want {want})")
        if p.returncode != want:
            print(p.stdout)
            sys.exit(1)


def main():
    mlp, mesh_mlp, interop, mpirun, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
    with tempfile.TemporaryDirectory() as d:
        judge_refuses(mpirun, args, interop, d)
        straight, half, resumed = (os.path.join(d, n + ".safetensors") for n in ("straight", "half", "resumed"))
        common = ["--optimizer", "adam", "--batches", "3"]
        run([mpirun] + args + ["-n", "4", mlp, "--steps", "10", "--speeds", "1,2,3,4", "--save", straight] + common)
        run([mpirun] + args + ["-n", "4", mlp, "--steps", "5", "--speeds", "1,2,3,4", "--save", half] + common)
        run([mpirun] + args + ["-n", "3", mlp, "--steps", "5", "--speeds", "2,0,1", "--resume", half, "--save", resumed] + common)
        run([mpirun] + args + ["-n", "2", interop, "compare", straight, resumed, "1e-12"])
        # The dp x tp mesh: 2 x 2, then resumed on a 1 x 3 mesh.
        mesh = ["--batches", "3"]
        run([mpirun] + args + ["-n", "4", mesh_mlp, "--steps", "10", "--mesh", "2x2", "--save", straight] + mesh)
        run([mpirun] + args + ["-n", "4", mesh_mlp, "--steps", "5", "--mesh", "2x2", "--save", half] + mesh)
        run([mpirun] + args + ["-n", "3", mesh_mlp, "--steps", "5", "--mesh", "1x3", "--resume", half, "--save", resumed] + mesh)
        run([mpirun] + args + ["-n", "2", interop, "compare", straight, resumed, "1e-12"])
    print("resume: 5 steps + resume at 3 ranks (or on a 1 x 3 mesh) + 5 steps == 10 steps straight")


if __name__ == "__main__":
    main()
