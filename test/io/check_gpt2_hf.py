#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""GPT-2 in shardex against Hugging Face's GPT2LMHeadModel (issue #26).

    check_gpt2_hf.py GPT2_HF_EXE NP MPIRUN [MPIRUN_ARGS...]

Makes a random GPT-2 with transformers in double (5 heads of 4, vocabulary 23:
sizes no rank count above 1 divides; biases and norms made non-trivial), saves
it with save_pretrained (config.json, model.safetensors), and runs gpt2_hf on
NP ranks with the heads, MLP columns and vocabulary split unevenly (a rank with
no heads and one with no vocabulary rows from 3 ranks on). gpt2_hf loads the
files, runs the same ids forward and backward and saves the logits, the loss
and every gradient under Hugging Face's names; each must be within 1e-10 of
transformers' (relative to the tensor's largest element). Then the reverse:
the model shardex saved must load with GPT2LMHeadModel.from_pretrained and give
the same logits (1e-12). Then all of it again in float32, the same model cast
and saved again by transformers, shardex in float: within 1e-4 (the reverse
1e-6). Exits 77 (SKIP), saying why, where torch, transformers or the
safetensors package is missing.
"""
import copy
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_peers import peers_hint  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
    from gpt2_random import random_gpt2
    from safetensors.torch import load_file, save_file
    from transformers import GPT2LMHeadModel
except ImportError as e:
    print(f"SKIP: needs torch, transformers and the safetensors package ({e}); {peers_hint()}")
    sys.exit(77)

# dtype: (shardex's element type, transformers' dtype, tolerance, the reverse's tolerance)
DTYPES = [("double", torch.float64, 1e-10, 1e-12), ("float", torch.float32, 1e-4, 1e-6)]
SPLITS = {  # heads (5), MLP columns (80), vocabulary rows (23) per rank
    "1": ("5", "80", "23"),
    "2": ("2,3", "30,50", "16,7"),
    "3": ("0,3,2", "20,0,60", "10,13,0"),
    "4": ("1,2,0,2", "10,20,30,20", "0,5,8,10"),
}


def rel_diff(ours, theirs):
    ours, theirs = ours.double().flatten(), theirs.detach().double().flatten()
    if ours.shape != theirs.shape:
        return float("inf")
    scale = max(theirs.abs().max().item(), 1e-300)
    return (ours - theirs).abs().max().item() / scale


def main():
    exe, np_, mpirun, mpi_args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    model = random_gpt2(26, layers=2, heads=5, width=20, positions=8, vocab=23)
    B, T = 2, 6
    ids = torch.randint(0, 23, (B, T))
    targets = torch.randint(0, 23, (B, T))
    heads, ffn, vocab = SPLITS[np_]
    failures = []
    checks = []
    for dtype, torch_dtype, tol, back_tol in DTYPES:
        typed = copy.deepcopy(model).to(torch_dtype)
        with tempfile.TemporaryDirectory() as tmp:
            hf_dir = os.path.join(tmp, "hf")
            typed.save_pretrained(hf_dir, safe_serialization=True)
            inputs = os.path.join(tmp, "inputs.safetensors")
            save_file({"ids": ids.double().flatten(), "targets": targets.double().flatten()}, inputs)
            out = os.path.join(tmp, "out.safetensors")
            cmd = [mpirun, *mpi_args, "-n", np_, exe, hf_dir, inputs, out, str(B), str(T), heads, ffn, vocab, dtype]
            run = subprocess.run(cmd, capture_output=True, text=True)
            if run.returncode != 0:
                print(run.stdout + run.stderr)
                print(f"FAIL: gpt2_hf ({dtype}) exited {run.returncode}")
                return 1
            ours = load_file(out)
            logits = typed(input_ids=ids).logits.reshape(B * T, -1)
            loss = F.cross_entropy(logits, targets.flatten())
            loss.backward()
            checks = [("logits", ours["logits"], logits), ("loss", ours["loss"], loss)]
            for name, p in typed.named_parameters():
                checks.append((name + ".grad", ours[name], p.grad))
            for name, a, b in checks:
                d = rel_diff(a, b)
                print(f"{dtype} {name}: {d:.2e}")
                if not d <= tol:
                    failures.append(f"{dtype} {name}: {d:.3e} > {tol}")
            # The reverse: what shardex saved, loaded by transformers.
            back = GPT2LMHeadModel.from_pretrained(os.path.join(tmp, "saved"), torch_dtype=torch_dtype)
            back.eval()
            d = rel_diff(back(input_ids=ids).logits.reshape(B * T, -1), logits)
            print(f"{dtype} from_pretrained(shardex's save) logits: {d:.2e}")
            if not d <= back_tol:
                failures.append(f"{dtype} from_pretrained of shardex's save: logits differ by {d:.3e}")
    print(f"splits: heads {heads}, MLP {ffn}, vocabulary {vocab}; transformers {__import__('transformers').__version__}, torch {torch.__version__}")
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print(f"OK: logits, loss and {len(checks) - 2} gradients within 1e-10 (double) and 1e-4 (float32) of "
          f"transformers on {np_} ranks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
