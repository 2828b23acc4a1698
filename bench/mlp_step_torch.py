#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The PyTorch peer of the C++ tensor-parallel MLP step benchmark.

One Megatron tensor-parallel MLP training step (forward and backward, no
optimizer step) in float32, over N processes with torch.distributed (gloo):

    Xr = f(X); Hh = gelu(Xr @ A_r + a_r, tanh); Y = g(Hh @ B_r) + b
    loss = (Y * G).sum(); loss.backward()

Rank r holds F/N columns of A (H x F), the matching entries of a, and F/N rows
of B (F x H); X (T x H, requires grad), b (H) and G (T x H) are whole on every
rank. f is identity forward / all_reduce backward, g the reverse. With
--ranks 1 one process runs without torch.distributed (f and g are identities).

usage: bench/mlp_step_torch.py [--tokens T] [--hidden H] [--ffn F] [--ranks N]
                               [--steps S] [--warmup W] [--threads P] [--seed K]

Prints one JSON line on stdout: median over the timed steps of the step time
(max over ranks, a barrier before each step) and of the time spent inside the
two all_reduce calls (max over ranks). Exits 77 when torch is not importable.
"""
import argparse, json, os, statistics, sys, time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn.functional as F
except ImportError as e:
    print(f"mlp_step_torch.py: torch not importable ({e}); skipped", file=sys.stderr)
    sys.exit(77)
from torch_rendezvous import init_gloo, rendezvous


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--ffn", type=int, default=4096)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    if min(a.tokens, a.hidden, a.ffn, a.ranks, a.steps, a.threads) < 1 or a.warmup < 0:
        p.error("sizes, --ranks, --steps and --threads must be >= 1, --warmup >= 0")
    if a.ffn % a.ranks:
        p.error(f"--ffn {a.ffn} is not divisible by --ranks {a.ranks}")
    return a


# Seconds spent inside the all_reduce calls of f and g since the last reset.
comm_seconds = 0.0


def _all_reduce_timed(t):
    global comm_seconds
    t0 = time.perf_counter()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    comm_seconds += time.perf_counter() - t0
    return t


class CopyToParallel(torch.autograd.Function):
    """Megatron's f: identity forward, all_reduce (sum) of the gradient backward."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce_timed(grad.contiguous().clone())


class ReduceFromParallel(torch.autograd.Function):
    """Megatron's g: all_reduce (sum) forward, identity backward."""

    @staticmethod
    def forward(ctx, x):
        return _all_reduce_timed(x.contiguous().clone())

    @staticmethod
    def backward(ctx, grad):
        return grad


def make_tensors(args, rank, nranks):
    """The whole problem from --seed (identical on every rank), then this rank's
    shard: dict of X, A, a, B, b (all requiring grad) and G."""
    gen = torch.Generator().manual_seed(args.seed)
    T, H, Fd = args.tokens, args.hidden, args.ffn
    X = torch.randn(T, H, generator=gen)
    A = torch.randn(H, Fd, generator=gen) / H ** 0.5
    a = torch.randn(Fd, generator=gen) * 0.1
    B = torch.randn(Fd, H, generator=gen) / Fd ** 0.5
    b = torch.randn(H, generator=gen) * 0.1
    G = torch.randn(T, H, generator=gen)
    Fr = Fd // nranks
    cols = slice(rank * Fr, (rank + 1) * Fr)
    t = {
        "X": X,
        "A": A[:, cols].contiguous(),
        "a": a[cols].contiguous(),
        "B": B[cols, :].contiguous(),
        "b": b,
    }
    for v in t.values():
        v.requires_grad_(True)
    t["G"] = G
    return t


def step(t, distributed):
    """One forward + backward; grads are cleared first (set to None)."""
    for k in ("X", "A", "a", "B", "b"):
        t[k].grad = None
    Xr = CopyToParallel.apply(t["X"]) if distributed else t["X"]
    Hh = F.gelu(Xr @ t["A"] + t["a"], approximate="tanh")
    P = Hh @ t["B"]
    Y = (ReduceFromParallel.apply(P) if distributed else P) + t["b"]
    loss = (Y * t["G"]).sum()
    loss.backward()
    return loss


def worker(rank, nranks, args, store):
    global comm_seconds
    torch.set_num_threads(args.threads)
    distributed = nranks > 1
    if distributed:
        init_gloo(rank, nranks, store)
    t = make_tensors(args, rank, nranks)
    step_s, comm_s = [], []
    for i in range(args.warmup + args.steps):
        if distributed:
            dist.barrier()
        comm_seconds = 0.0
        t0 = time.perf_counter()
        step(t, distributed)
        dt = time.perf_counter() - t0
        if i >= args.warmup:
            step_s.append(dt)
            comm_s.append(comm_seconds)
    times = torch.tensor([step_s, comm_s], dtype=torch.float64)
    if distributed:
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
    if rank == 0:
        step_ms = statistics.median(times[0].tolist()) * 1e3
        comm_ms = statistics.median(times[1].tolist()) * 1e3
        T, H, Fd = args.tokens, args.hidden, args.ffn
        print(json.dumps({
            "bench": "mlp_step", "impl": "pytorch", "torch": torch.__version__,
            "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "detected"),
            "ranks": nranks, "threads_per_rank": args.threads,
            "tokens": T, "hidden": H, "ffn": Fd, "dtype": "float32",
            "step_ms": round(step_ms, 3), "comm_ms": round(comm_ms, 3),
            "compute_ms": round(step_ms - comm_ms, 3), "steps": args.steps,
            "gflop": round(12 * T * H * Fd / 1e9, 4),
        }, separators=(",", ":")), flush=True)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


def main():
    args = parse_args()
    if args.ranks == 1:
        worker(0, 1, args, None)
    else:
        with rendezvous() as store:
            mp.spawn(worker, args=(args.ranks, args, store), nprocs=args.ranks, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
