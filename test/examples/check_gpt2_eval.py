#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""gpt2 --eval against Hugging Face's GPT2LMHeadModel on the same tokens (issue #26).

    check_gpt2_eval.py GPT2 MPIRUN [MPIRUN_ARGS...]

Makes a random GPT-2 with transformers in double (3 heads, vocabulary 50:
sizes neither 3 nor 4 ranks divide; biases and norms made non-trivial), saves
it with save_pretrained, and writes random token ids as a nanoGPT .bin
(little-endian uint16). examples/gpt2 --load DIR --eval --data FILE prints
`eval loss: X`: the mean over --eval-batches of batch i's loss, batch i being
the tokens [i*B*T, (i+1)*B*T] (inputs the first B*T, targets the last B*T, the
B sequences consecutive). transformers computes the same mean on the same
windows; the two must agree to the 6 digits gpt2 prints (1e-5 relative), on 3
ranks at speeds 1,2,3 and on a 2 x 2 mesh (--mesh: each dp group evaluating
its sequences) with a rank holding nothing. Exits 77 (SKIP), saying why, where
torch or transformers is missing.
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "io"))
from python_peers import peers_hint  # noqa: E402

try:
    import numpy  # noqa: F401 (tokens.numpy())
    import torch
    import torch.nn.functional as F
    from gpt2_random import random_gpt2
except ImportError as e:
    print(f"SKIP: needs numpy, torch and transformers ({e}); {peers_hint()}")
    sys.exit(77)

B, T, BATCHES, VOCAB = 2, 16, 3, 50
RUNS = [("3", ["--speeds", "1,2,3"]), ("4", ["--mesh", "2x2", "--speeds", "0,1"])]
TOL = 1e-5


def main():
    gpt2, mpirun, mpi_args = sys.argv[1], sys.argv[2], sys.argv[3:]
    model = random_gpt2(27, layers=2, heads=3, width=24, positions=32, vocab=VOCAB)
    tokens = torch.randint(0, VOCAB, (BATCHES * B * T + 5,))
    with torch.no_grad():
        losses = []
        for i in range(BATCHES):
            window = tokens[i * B * T:(i + 1) * B * T + 1]
            logits = model(input_ids=window[:-1].view(B, T)).logits
            losses.append(F.cross_entropy(logits.reshape(B * T, -1), window[1:]).item())
    theirs = sum(losses) / BATCHES
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = os.path.join(tmp, "hf")
        model.save_pretrained(hf_dir, safe_serialization=True)
        data = os.path.join(tmp, "tokens.bin")
        tokens.numpy().astype("<u2").tofile(data)
        for n, flags in RUNS:
            cmd = [mpirun, *mpi_args, "-n", n, gpt2, "--load", hf_dir, "--eval", "--data", data, "--batch", str(B),
                   "--seq", str(T), "--eval-batches", str(BATCHES), "--dtype", "double"] + flags
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            found = re.search(r"eval loss: (\S+) \((\d+) batches", run.stdout)
            if run.returncode != 0 or not found:
                print(run.stdout + run.stderr)
                failures.append(f"gpt2 --eval on {n} ranks {' '.join(flags)} exited {run.returncode}"
                                + ("" if found else " without an 'eval loss:' line"))
                continue
            ours, batches = float(found.group(1)), int(found.group(2))
            diff = abs(ours - theirs) / abs(theirs)
            print(f"{n} ranks {' '.join(flags)}: eval loss {ours} over {batches} batches; transformers {theirs:.8f}; "
                  f"relative difference {diff:.2e} (tolerance {TOL})")
            if batches != BATCHES:
                failures.append(f"{n} ranks: {batches} batches evaluated, not {BATCHES}")
            if not diff <= TOL:
                failures.append(f"{n} ranks {' '.join(flags)}: eval loss {ours} but transformers' is {theirs}")
    for f in failures:
        print("FAIL: " + f)
    if not failures:
        print(f"gpt2 --eval equals transformers' mean loss over {BATCHES} batches of {B} x {T} (1e-5)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
