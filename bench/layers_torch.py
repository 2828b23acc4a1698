#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The PyTorch peer of bench_layers (bench/layers.cpp): the same operations,
shapes, losses and splits, float32, over N processes with torch.distributed
(gloo), as Megatron-LM computes them:

- cross_entropy: rank r holds its columns of the logits; Megatron's
  vocab-parallel cross-entropy (the row max all-reduced with MAX, one SUM
  all-reduce of the sum of exp and the target logit; the backward local:
  softmax minus the one-hot of the rank's slice, scaled by the mean).
- attention: rank r holds its heads of q, k, v (batch, seq, heads, dh); causal
  attention as torch 1.13 computes it without scaled_dot_product_attention:
  softmax(q k^T / sqrt(dh) + causal mask) v; loss = out.sum().
- layer_norm, rms_norm: rank r holds its tokens of x (sequence parallelism);
  F.layer_norm, and RMS norm by its formula (torch 1.13 has none); loss =
  y.sum(); the weights' gradients all-reduced, as Megatron's
  finalize_model_grads does for sequence-parallel weights.
- embedding: rank r holds its vocabulary rows; Megatron's VocabParallelEmbedding
  (ids outside the rank's rows masked to zero, the lookup all-reduced); loss = out.sum().

usage: bench/layers_torch.py [--op all|cross_entropy|attention|layer_norm|rms_norm|embedding]
       [--batch B] [--seq S] [--hidden H] [--heads N] [--vocab V] [--ranks R]
       [--steps K] [--warmup W] [--threads P]

With --ranks 1 one process runs the unsharded operation (F.cross_entropy,
F.embedding, ...) with --threads threads. Prints one JSON line per operation:
the median over the timed steps of the step time and of its forward part (max
over ranks, a barrier before each step). Exits 77 when torch is not importable.
"""
import argparse, json, os, statistics, sys, time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn.functional as F
except ImportError as e:
    print(f"layers_torch.py: torch not importable ({e}); skipped", file=sys.stderr)
    sys.exit(77)
from torch_rendezvous import init_gloo, rendezvous

OPS = ["cross_entropy", "attention", "layer_norm", "rms_norm", "embedding"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", choices=["all"] + OPS, default="all")
    for name, default in [("batch", 4), ("seq", 256), ("hidden", 768), ("heads", 12), ("vocab", 50257),
                          ("ranks", 2), ("steps", 10), ("warmup", 2), ("threads", 1)]:
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args(argv)
    if min(a.batch, a.seq, a.hidden, a.heads, a.vocab, a.ranks, a.steps, a.threads) < 1 or a.warmup < 0:
        p.error("sizes, --ranks, --steps and --threads must be >= 1, --warmup >= 0")
    if a.hidden % a.heads:
        p.error(f"--hidden {a.hidden} is not a multiple of --heads {a.heads}")
    return a


def even_split(extent, parts):
    lens = [extent // parts] * parts
    for r in range(extent % parts):
        lens[r] += 1
    return lens


def my_range(extent, ranks, rank):
    lens = even_split(extent, ranks)
    first = sum(lens[:rank])
    return first, first + lens[rank]


def all_reduce(t, op="sum"):
    if dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return t


class VocabParallelCrossEntropy(torch.autograd.Function):
    """Megatron's: logits (tokens, my vocab columns) from column `first`."""

    @staticmethod
    def forward(ctx, logits, targets, first):
        m = logits.max(dim=1)[0]
        all_reduce(m, "max")
        e = (logits - m.unsqueeze(1)).exp_()
        mine = (targets >= first) & (targets < first + logits.shape[1])
        local = (targets - first).clamp_(0, logits.shape[1] - 1)
        packed = torch.stack([e.sum(dim=1), torch.where(mine, logits.gather(1, local.unsqueeze(1)).squeeze(1) - m,
                                                        torch.zeros_like(m))])
        all_reduce(packed)
        sum_exp, target_logit = packed[0], packed[1]
        loss = (sum_exp.log() - target_logit).mean()
        e.div_(sum_exp.unsqueeze(1))
        ctx.save_for_backward(e, mine, local)
        return loss

    @staticmethod
    def backward(ctx, g):
        p, mine, local = ctx.saved_tensors
        rows = torch.arange(p.shape[0])
        p[rows[mine], local[mine]] -= 1.0
        return p.mul_(g / p.shape[0]), None, None


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class ReduceBackward(torch.autograd.Function):
    """Identity forward, all-reduce backward (a sequence-parallel weight)."""

    @staticmethod
    def forward(ctx, w):
        return w

    @staticmethod
    def backward(ctx, g):
        return all_reduce(g.clone())


class ReduceForward(torch.autograd.Function):
    """All-reduce forward, identity backward (the embedding's Partial sum)."""

    @staticmethod
    def forward(ctx, x):
        return all_reduce(x)

    @staticmethod
    def backward(ctx, g):
        return g


def make_step(op, a, rank):
    """Returns (forward, backward) closures for one training step of `op` on this rank."""
    g = torch.Generator().manual_seed(1 + rank)
    n, r = a.ranks, rank
    tokens = a.batch * a.seq
    if op == "cross_entropy":
        first, last = my_range(a.vocab, n, r)
        logits = (torch.randn(tokens, last - first, generator=g) * 2).requires_grad_()
        targets = torch.randint(0, a.vocab, (tokens,), generator=torch.Generator().manual_seed(2))
        params = [logits]
        if n == 1:
            fwd = lambda: F.cross_entropy(logits, targets)
        else:
            fwd = lambda: VocabParallelCrossEntropy.apply(logits, targets, first)
    elif op == "attention":
        first, last = my_range(a.heads, n, r)
        dh = a.hidden // a.heads
        q, k, v = [torch.randn(a.batch, last - first, a.seq, dh, generator=g).requires_grad_() for _ in range(3)]
        params = [q, k, v]
        mask = torch.full((a.seq, a.seq), float("-inf")).triu_(1)
        scale = 1.0 / dh ** 0.5

        def fwd():
            s = torch.matmul(q, k.transpose(-1, -2)) * scale + mask
            return torch.matmul(torch.softmax(s, dim=-1), v).sum()
    elif op in ("layer_norm", "rms_norm"):
        first, last = my_range(tokens, n, r)
        x = torch.randn(last - first, a.hidden, generator=g).requires_grad_()
        w = (1 + 0.1 * torch.randn(a.hidden, generator=torch.Generator().manual_seed(7))).requires_grad_()
        b = (0.1 * torch.randn(a.hidden, generator=torch.Generator().manual_seed(8))).requires_grad_()
        params = [x, w, b]
        if op == "layer_norm":
            fwd = lambda: F.layer_norm(x, (a.hidden,), ReduceBackward.apply(w), ReduceBackward.apply(b), 1e-5).sum()
        else:
            fwd = lambda: rms_norm(x, ReduceBackward.apply(w), 1e-5).sum()
    elif op == "embedding":
        first, last = my_range(a.vocab, n, r)
        table = (0.02 * torch.randn(last - first, a.hidden, generator=g)).requires_grad_()
        ids = torch.randint(0, a.vocab, (tokens,), generator=torch.Generator().manual_seed(10))
        params = [table]
        if n == 1:
            fwd = lambda: F.embedding(ids, table).sum()
        else:
            def fwd():
                outside = (ids < first) | (ids >= last)
                local = (ids - first).masked_fill_(outside, 0)
                out = F.embedding(local, table).masked_fill(outside.unsqueeze(1), 0.0)
                return ReduceForward.apply(out).sum()
    else:
        raise ValueError(op)

    def forward():
        for p in params:
            p.grad = None
        return fwd()

    return forward, lambda loss: loss.backward()


def max_over_ranks(x):
    t = torch.tensor([x], dtype=torch.float64)
    if dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def run(rank, a, store, out):
    torch.set_num_threads(a.threads)
    if a.ranks > 1:
        init_gloo(rank, a.ranks, store)
    for op in OPS if a.op == "all" else [a.op]:
        forward, backward = make_step(op, a, rank)
        steps, fwds = [], []
        for i in range(a.warmup + a.steps):
            if dist.is_initialized():
                dist.barrier()
            t0 = time.perf_counter()
            loss = forward()
            t1 = time.perf_counter()
            backward(loss)
            t2 = time.perf_counter()
            if i >= a.warmup:
                steps.append(max_over_ranks((t2 - t0) * 1e3))
                fwds.append(max_over_ranks((t1 - t0) * 1e3))
        if rank == 0:
            out.put(json.dumps({"bench": "layers", "impl": "pytorch", "op": op, "ranks": a.ranks,
                                "threads_per_rank": a.threads, "batch": a.batch, "seq": a.seq, "hidden": a.hidden,
                                "heads": a.heads, "vocab": a.vocab, "dtype": "float32",
                                "step_ms": statistics.median(steps), "forward_ms": statistics.median(fwds),
                                "steps": a.steps, "torch": torch.__version__,
                                "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "detected")}))
    if dist.is_initialized():
        dist.destroy_process_group()


def main():
    a = parse_args()
    if a.ranks == 1:
        import queue
        q = queue.Queue()
        run(0, a, None, q)
    else:
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        with rendezvous() as store:
            procs = [ctx.Process(target=run, args=(r, a, store, q)) for r in range(a.ranks)]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
        if any(p.exitcode != 0 for p in procs):
            sys.exit(1)
    for _ in OPS if a.op == "all" else [a.op]:
        print(q.get(timeout=10), flush=True)


if __name__ == "__main__":
    main()
