#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The layers of nn/ against PyTorch's autograd on the same values (issue #25).

    check_layers_torch.py LAYERS_TORCH_EXE NP MPIRUN [MPIRUN_ARGS...]

Runs layers_torch on NP ranks (uneven shards, a rank with nothing from 3
ranks on), which saves the inputs, results and gradients of embedding,
layer_norm, rms_norm, causal_attention and cross_entropy, and the parameters
after five AdamW steps under a warm-up + cosine schedule; then recomputes each
with torch in double (F.embedding, F.layer_norm, the RMSNorm formula (torch
1.13 has no rms_norm), the formula of scaled_dot_product_attention with a
causal mask (1.13 has none), F.cross_entropy with ignore_index, and
torch.optim.AdamW with the same learning rate per step) and requires every
value within 1e-10 (relative to max(1, |value|)). Exits 77 (SKIP), saying
why, where torch or the safetensors package is missing.
"""
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_peers import peers_hint  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
    from safetensors.torch import load_file
except ImportError as e:
    print(f"SKIP: needs torch and the safetensors package ({e}); {peers_hint()}")
    sys.exit(77)

TOL = 1e-10


def main():
    exe, np_, mpirun, mpi_args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "layers.safetensors")
        run = subprocess.run([mpirun, *mpi_args, "-n", np_, exe, path], capture_output=True, text=True)
        if run.returncode != 0:
            print(run.stdout + run.stderr)
            print(f"FAIL: layers_torch exited {run.returncode}")
            return 1
        t = load_file(path)
    worst = {}
    failures = []

    def compare(name, ours, theirs):
        ours, theirs = ours.double(), theirs.detach().double()
        if ours.shape != theirs.shape:
            failures.append(f"{name}: shape {tuple(ours.shape)} against torch's {tuple(theirs.shape)}")
            return
        d = ((ours - theirs).abs() / theirs.abs().clamp(min=1.0)).max().item() if ours.numel() else 0.0
        worst[name] = d
        if not d <= TOL:
            failures.append(f"{name}: max relative difference {d:.3g} > {TOL}")

    def leaf(name):
        return t[name].clone().requires_grad_(True)

    # Embedding.
    table = leaf("emb.table")
    y = F.embedding(t["emb.ids"].long(), table)
    (y * t["emb.g"]).sum().backward()
    compare("embedding", t["emb.y"], y)
    compare("embedding d table", t["emb.dtable"], table.grad)

    # Layer norm and RMS norm.
    for k, rms in (("ln.", False), ("rms.", True)):
        x, w = leaf(k + "x"), leaf(k + "w")
        if rms:
            y = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * w
        else:
            b = leaf(k + "b")
            y = F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
        (y * t[k + "g"]).sum().backward()
        what = "rms_norm" if rms else "layer_norm"
        compare(what, t[k + "y"], y)
        compare(what + " dx", t[k + "dx"], x.grad)
        compare(what + " dw", t[k + "dw"], w.grad)
        if not rms:
            compare(what + " db", t[k + "db"], b.grad)

    # Causal attention, (batch, seq, heads, dh), grouped KV heads.
    q, k, v = leaf("att.q"), leaf("att.k"), leaf("att.v")
    group = q.shape[2] // k.shape[2]
    qh = q.transpose(1, 2)  # (batch, heads, seq, dh)
    kh = k.repeat_interleave(group, dim=2).transpose(1, 2)
    vh = v.repeat_interleave(group, dim=2).transpose(1, 2)
    seq = q.shape[1]
    scores = qh @ kh.transpose(-1, -2) / math.sqrt(q.shape[-1])
    mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)
    y = (scores.masked_fill(mask, float("-inf")).softmax(-1) @ vh).transpose(1, 2)
    (y * t["att.g"]).sum().backward()
    compare("causal_attention", t["att.y"], y)
    compare("causal_attention dq", t["att.dq"], q.grad)
    compare("causal_attention dk", t["att.dk"], k.grad)
    compare("causal_attention dv", t["att.dv"], v.grad)

    # Cross-entropy, the mean over the tokens not ignored.
    logits = leaf("ce.logits")
    loss = F.cross_entropy(logits, t["ce.targets"].long(), ignore_index=-100)
    loss.backward()
    compare("cross_entropy", t["ce.loss"].reshape(()), loss)
    compare("cross_entropy d logits", t["ce.dlogits"], logits.grad)

    # AdamW under the warm-up + cosine schedule, the bias without weight decay.
    w, b = t["adam.w0"].clone().requires_grad_(True), t["adam.b0"].clone().requires_grad_(True)
    opt = torch.optim.AdamW([{"params": [w], "weight_decay": 0.3}, {"params": [b], "weight_decay": 0.0}],
                            lr=0.0, betas=(0.8, 0.95), eps=1e-8)

    def schedule(step, peak=0.05, floor=0.005, warmup=2, total=5):
        if step < warmup:
            return peak * (step + 1) / warmup
        if step >= total:
            return floor
        return floor + 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup))) * (peak - floor)

    for step in range(5):
        opt.zero_grad()
        ((w * w * t["adam.c"]).sum() + (b * t["adam.c2"]).sum()).backward()
        for group_ in opt.param_groups:
            group_["lr"] = schedule(step)
        opt.step()
        compare(f"AdamW step {step + 1} w", t[f"adam.w{step + 1}"], w)
        compare(f"AdamW step {step + 1} b", t[f"adam.b{step + 1}"], b)

    for name, d in worst.items():
        print(f"{name:32s} max relative difference {d:.2e}")
    if failures:
        print("\n".join("FAIL: " + f for f in failures))
        return 1
    print(f"OK: {len(worst)} comparisons with torch {torch.__version__} within {TOL} on {np_} ranks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
