#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The PyTorch peers of the GPT-2 training-step benchmark.

One full training step (zero_grad, forward, mean cross-entropy, backward,
clip_grad_norm 1.0, AdamW lr 6e-4, betas (0.9, 0.95), weight decay 0.1 on 2-D
weights, 0 on biases and LayerNorms) of Hugging Face's GPT2LMHeadModel (no
dropout) on one batch of B sequences of T tokens, by:

- megatron: GPT-2 in plain PyTorch with Megatron-LM tensor parallelism over
  --ranks processes (gloo): q, k, v and c_fc column-parallel behind f, both
  c_proj row-parallel followed by g; the token embedding vocab-parallel and
  tied to the output layer, whose logits feed Megatron's vocab-parallel
  cross-entropy. Heads, MLP columns and vocabulary rows split as evenly as
  possible, unevenly where they must (50257 over 2: 25129 + 25128), no padding.
- transformers: transformers.GPT2LMHeadModel in one process.

usage: bench/gpt2_step_torch.py [--impl megatron|transformers] [--layers L] [--heads N]
       [--width H] [--context C] [--vocab V] [--batch B] [--seq T] [--ranks R]
       [--threads P] [--steps S] [--warmup W] [--seed K] [--dtype float32|float64]
       [--device cpu|cuda] [--check]

--device cuda runs the transformers peer on the GPU (synchronizing before each
step's time is taken), the peer of examples/gpt2 --backend nccl.

Prints one JSON line: the median over the timed steps of the step time (max
over ranks, a barrier before each step), tokens/s, the peak RSS (max over
ranks) and the first step's loss. --check instead copies a tiny float64
transformers model into the megatron one at 1, 2 and 3 ranks and compares the
loss, every gradient, the gradient norm and the weights after the step (1e-10
relative): prints "check: OK" or exits 1. Exits 77 when torch (or, where
needed, transformers) is not importable.
"""
import argparse, json, math, os, resource, statistics, sys, tempfile, time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn.functional as F
except ImportError as e:
    print(f"gpt2_step_torch.py: torch not importable ({e}); skipped", file=sys.stderr)
    sys.exit(77)
from torch_rendezvous import init_gloo, rendezvous


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--impl", choices=["megatron", "transformers"], default="megatron")
    for name, default in [("layers", 12), ("heads", 12), ("width", 768), ("context", 1024), ("vocab", 50257),
                          ("batch", 4), ("seq", 64), ("ranks", None), ("threads", None), ("steps", 5),
                          ("warmup", 2), ("seed", 1)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--check", action="store_true")
    a = p.parse_args(argv)
    if a.device == "cuda" and (a.impl != "transformers" or a.check):
        p.error("--device cuda times --impl transformers only (the megatron peer runs gloo on CPU ranks)")
    if a.device == "cuda" and not torch.cuda.is_available():
        print("gpt2_step_torch.py: --device cuda but torch sees no GPU; skipped", file=sys.stderr)
        sys.exit(77)
    if a.impl == "transformers" and a.ranks not in (None, 1):
        p.error("--impl transformers runs in one process (--ranks 1)")
    a.ranks = (2 if a.impl == "megatron" else 1) if a.ranks is None else a.ranks
    a.threads = (1 if a.impl == "megatron" else 2) if a.threads is None else a.threads
    if min(a.layers, a.heads, a.width, a.context, a.vocab, a.batch, a.seq, a.ranks, a.threads, a.steps) < 1 \
            or a.warmup < 0:
        p.error("sizes, --ranks, --steps and --threads must be >= 1, --warmup >= 0")
    if a.width % a.heads or a.seq > a.context or a.ranks > a.heads:
        p.error("need --width a multiple of --heads, --seq <= --context and --ranks <= --heads")
    return a


def my_range(extent, ranks, rank):
    """Rank's [first, last) of an as-even-as-possible split; the first extent % ranks ranks get one more."""
    q, rem = divmod(extent, ranks)
    first = rank * q + min(rank, rem)
    return first, first + q + (rank < rem)


def all_reduce(t, op="sum"):  # a no-op without torch.distributed (--ranks 1)
    if dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return t


class CopyToParallel(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce (sum) of the gradient backward."""
    forward = staticmethod(lambda ctx, x: x.view_as(x))
    backward = staticmethod(lambda ctx, g: all_reduce(g.contiguous().clone()))


class ReduceFromParallel(torch.autograd.Function):
    """Megatron's g: all-reduce (sum) forward, identity backward."""
    forward = staticmethod(lambda ctx, x: all_reduce(x.contiguous().clone()))
    backward = staticmethod(lambda ctx, g: g)


class VocabParallelCrossEntropy(torch.autograd.Function):
    """Megatron's: mean cross-entropy of logits (tokens, my vocab columns from `first`)."""

    @staticmethod
    def forward(ctx, logits, targets, first):
        m = all_reduce(logits.max(dim=1)[0], "max")
        e = (logits - m.unsqueeze(1)).exp_()
        mine = (targets >= first) & (targets < first + logits.shape[1])
        local = (targets - first).clamp_(0, logits.shape[1] - 1)
        target_logit = torch.where(mine, logits.gather(1, local.unsqueeze(1)).squeeze(1) - m, torch.zeros_like(m))
        # One all-reduce for both sums instead of two.
        sum_exp, target_logit = all_reduce(torch.stack([e.sum(dim=1), target_logit]))
        e.div_(sum_exp.unsqueeze(1))
        ctx.save_for_backward(e, mine, local)
        return (sum_exp.log() - target_logit).mean()

    @staticmethod
    def backward(ctx, g):
        p, mine, local = ctx.saved_tensors  # the backward is local: softmax minus my slice of the one-hot
        rows = torch.arange(p.shape[0])
        p[rows[mine], local[mine]] -= 1.0
        return p.mul_(g / p.shape[0]), None, None


def full_shapes(a):
    """Hugging Face's parameter names (lm_head.weight is tied to wte) and their whole shapes."""
    H = a.width
    layer = {"ln_1.weight": (H,), "ln_1.bias": (H,), "attn.c_attn.weight": (H, 3 * H), "attn.c_attn.bias": (3 * H,),
             "attn.c_proj.weight": (H, H), "attn.c_proj.bias": (H,), "ln_2.weight": (H,), "ln_2.bias": (H,),
             "mlp.c_fc.weight": (H, 4 * H), "mlp.c_fc.bias": (4 * H,), "mlp.c_proj.weight": (4 * H, H),
             "mlp.c_proj.bias": (H,)}
    return {"transformer.wte.weight": (a.vocab, H), "transformer.wpe.weight": (a.context, H),
            **{f"transformer.h.{i}.{n}": s for i in range(a.layers) for n, s in layer.items()},
            "transformer.ln_f.weight": (H,), "transformer.ln_f.bias": (H,)}


def shard_of(name, a, rank):
    """(dim, indices) of rank's shard of parameter `name` (HF layout; Conv1D weights are (in, out)),
    or None where every rank holds it whole."""
    dh = a.width // a.heads
    h0, h1 = my_range(a.heads, a.ranks, rank)
    f0, f1 = my_range(4 * a.width, a.ranks, rank)
    col = int(name.endswith("weight"))  # column-parallel: the weight's dim 1, the bias's dim 0
    if name.endswith("wte.weight"):
        return 0, torch.arange(*my_range(a.vocab, a.ranks, rank))
    if ".c_attn." in name:  # my heads' columns of each of q, k and v
        return col, torch.cat([torch.arange(j * a.width + h0 * dh, j * a.width + h1 * dh) for j in range(3)])
    if ".c_fc." in name:
        return col, torch.arange(f0, f1)
    if name.endswith("attn.c_proj.weight"):
        return 0, torch.arange(h0 * dh, h1 * dh)
    if name.endswith("mlp.c_proj.weight"):
        return 0, torch.arange(f0, f1)
    return None


def make_params(a, rank, dtype, whole=None):
    """Rank's parameters by HF name: shards of `whole` (a dict of whole tensors) when given, else
    initialised as HF does (normal 0.02, c_proj weights 0.02/sqrt(2 L), zero biases, unit LN),
    replicated ones from a generator every rank shares, shards from a per-rank one."""
    shared = torch.Generator().manual_seed(a.seed)
    own = torch.Generator().manual_seed(a.seed * 1000 + rank + 1)
    params = {}
    for name, shape in full_shapes(a).items():
        spec = shard_of(name, a, rank)
        if whole is not None:
            t = whole[name] if spec is None else whole[name].index_select(spec[0], spec[1])
        else:
            shape = [len(spec[1]) if spec and d == spec[0] else n for d, n in enumerate(shape)]
            if len(shape) == 1:
                t = torch.ones(shape) if ".ln_" in name and name.endswith("weight") else torch.zeros(shape)
            else:
                std = 0.02 / math.sqrt(2 * a.layers) if name.endswith("c_proj.weight") else 0.02
                t = torch.randn(shape, generator=shared if spec is None else own) * std
        params[name] = t.to(dtype).contiguous().requires_grad_()
    return params


def megatron_loss(P, a, rank, ids, targets):
    B, T = ids.shape
    H, dh = a.width, a.width // a.heads
    f, g = CopyToParallel.apply, ReduceFromParallel.apply
    wte = P["transformer.wte.weight"]
    v0, v1 = my_range(a.vocab, a.ranks, rank)
    outside = (ids < v0) | (ids >= v1)
    emb = F.embedding((ids - v0).masked_fill(outside, 0), wte).masked_fill(outside.unsqueeze(-1), 0.0)
    x = g(emb) + P["transformer.wpe.weight"][:T]
    causal = torch.ones(T, T, dtype=torch.bool).triu_(1)
    for i in range(a.layers):
        p = lambda n: P[f"transformer.h.{i}.{n}"]
        h = f(F.layer_norm(x, (H,), p("ln_1.weight"), p("ln_1.bias"), 1e-5))
        q, k, v = (torch.addmm(p("attn.c_attn.bias"), h.view(B * T, H), p("attn.c_attn.weight"))
                   .view(B, T, 3, -1, dh).permute(2, 0, 3, 1, 4))  # each (B, my heads, T, dh)
        s = (q @ k.transpose(-1, -2) / math.sqrt(dh)).masked_fill_(causal, float("-inf"))
        o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, -1)
        x = x + g(o @ p("attn.c_proj.weight")) + p("attn.c_proj.bias")
        h = f(F.layer_norm(x, (H,), p("ln_2.weight"), p("ln_2.bias"), 1e-5))
        h = F.gelu(torch.addmm(p("mlp.c_fc.bias"), h.view(B * T, H), p("mlp.c_fc.weight")), approximate="tanh")
        x = x + g(h @ p("mlp.c_proj.weight")).view(B, T, H) + p("mlp.c_proj.bias")
    h = f(F.layer_norm(x, (H,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], 1e-5))
    return VocabParallelCrossEntropy.apply(h.view(B * T, H) @ wte.t(), targets.reshape(-1), v0)


def adamw(params):
    ps = list(params)
    return torch.optim.AdamW([{"params": [p for p in ps if p.dim() >= 2], "weight_decay": 0.1},
                              {"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0}],
                             lr=6e-4, betas=(0.9, 0.95))


def clip_tp(P, a, rank, max_norm=1.0):
    """clip_grad_norm_ for TP: squares of the shards summed over ranks, replicated ones counted once."""
    sq = torch.zeros(2, dtype=torch.float64)  # [sharded, replicated]
    for n, p in P.items():
        sq[int(shard_of(n, a, rank) is None)] += torch.linalg.vector_norm(p.grad).double() ** 2
    sharded = all_reduce(sq[0].clone())
    norm = math.sqrt(sharded.item() + sq[1].item())
    coef = min(1.0, max_norm / (norm + 1e-6))  # as torch.nn.utils.clip_grad_norm_
    for p in P.values():
        p.grad.mul_(coef)
    return norm


def tokens(a):
    """Inputs and targets (B, T): a random token stream of B*T+1 ids and the same shifted by one."""
    stream = torch.randint(0, a.vocab, (a.batch * a.seq + 1,), generator=torch.Generator().manual_seed(a.seed))
    return stream[:-1].view(a.batch, a.seq), stream[1:].view(a.batch, a.seq)


def megatron_worker(rank, a, store, whole_path=None, out_dir=None):
    torch.set_num_threads(a.threads)
    if a.ranks > 1:
        init_gloo(rank, a.ranks, store)
    P = make_params(a, rank, getattr(torch, a.dtype), torch.load(whole_path) if whole_path else None)
    opt = adamw(P.values())
    ids, targets = tokens(a)
    forward_backward, clip_and_step = step_fns(opt, lambda: megatron_loss(P, a, rank, ids, targets),
                                               lambda: clip_tp(P, a, rank))
    if out_dir:  # --check: one step, saving what the parent compares
        loss = forward_backward()
        grads = {n: p.grad.clone() for n, p in P.items()}
        norm = clip_and_step()
        torch.save({"loss": loss.item(), "norm": norm, "grads": grads,
                    "params": {n: p.detach() for n, p in P.items()}}, os.path.join(out_dir, f"{a.ranks}_{rank}.pt"))
    else:
        times, first_loss = timed(a, forward_backward, clip_and_step)
        stats = all_reduce(torch.tensor(times + [rss_mib()], dtype=torch.float64), "max")
        if rank == 0:
            report(a, statistics.median(stats[:-1].tolist()), stats[-1].item(), first_loss)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def timed(a, forward_backward, clip_and_step):
    """Step times (s) of the timed steps, a barrier before each, and the first step's loss."""
    times, losses = [], []
    for i in range(a.warmup + a.steps):
        if dist.is_initialized():
            dist.barrier()
        t0 = time.perf_counter()
        loss = forward_backward()
        clip_and_step()
        if a.device == "cuda":  # the optimizer's kernels are queued, not done, when step() returns
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    return times[a.warmup:], losses[0]


def hf_model(a, dtype):
    try:  # imported only here: megatron ranks would pay its memory for nothing
        import transformers
    except ImportError as e:
        print(f"gpt2_step_torch.py: transformers not importable ({e}); skipped", file=sys.stderr)
        sys.exit(77)
    torch.manual_seed(a.seed)
    cfg = transformers.GPT2Config(n_layer=a.layers, n_head=a.heads, n_embd=a.width, n_positions=a.context,
                                  vocab_size=a.vocab, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                  use_cache=False)
    model = transformers.GPT2LMHeadModel(cfg).to(device=a.device, dtype=dtype).train()
    opt = adamw(model.parameters())
    ids, targets = (t.to(a.device) for t in tokens(a))
    # Not labels=: HF shifts them inside; our targets are already the ids shifted by one.
    return model, *step_fns(opt, lambda: F.cross_entropy(model(ids).logits.view(-1, a.vocab), targets.reshape(-1)),
                            lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item())


def step_fns(opt, loss_fn, clip_fn):
    """The step as two halves (--check compares the gradients in between): zero_grad, forward and
    backward, returning the loss; clipping and the optimizer step, returning the gradient norm."""

    def forward_backward():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        return loss

    def clip_and_step():
        norm = clip_fn()
        opt.step()
        return norm

    return forward_backward, clip_and_step


def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def report(a, step_s, rss, first_loss):
    print(json.dumps({"bench": "gpt2_step", "impl": a.impl, "ranks": a.ranks, "threads": a.threads,
                      "batch": a.batch, "seq": a.seq, "layers": a.layers, "heads": a.heads, "width": a.width,
                      "vocab": a.vocab, "dtype": a.dtype, "device": a.device, "step_ms": round(step_s * 1e3, 3),
                      "tokens_per_s": round(a.batch * a.seq / step_s, 1), "peak_rss_mib": round(rss, 1),
                      "first_loss": first_loss, "steps": a.steps, "torch": torch.__version__,
                      "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "detected")},
                     separators=(",", ":")), flush=True)


def rel_err(x, ref):
    x, ref = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(ref, dtype=torch.float64)
    e = ((x - ref).abs().max() / ref.abs().max().clamp(min=1e-300)).item()
    return e if e == e else math.inf  # NaN: a shard was never written


def check(a):
    """Tiny float64 HF model as reference; megatron copies of it at 1, 2 and 3 ranks must match it."""
    a = argparse.Namespace(**{**vars(a), "layers": 2, "heads": 3, "width": 12, "context": 16, "vocab": 37,
                              "batch": 2, "seq": 5, "dtype": "float64", "threads": 1})
    model, forward_backward, clip_and_step = hf_model(a, torch.float64)
    whole = {n: p.detach().clone() for n, p in model.named_parameters()}
    assert {n: tuple(t.shape) for n, t in whole.items()} == full_shapes(a), "parameter names/shapes differ from HF"
    loss = forward_backward().item()
    ref = {"grads": {n: p.grad.clone() for n, p in model.named_parameters()}}
    norm = clip_and_step()
    ref["params"] = {n: p.detach() for n, p in model.named_parameters()}
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "whole.pt")
        torch.save(whole, path)
        for n in (1, 2, 3):
            b = argparse.Namespace(**{**vars(a), "ranks": n})
            if n == 1:
                megatron_worker(0, b, None, path, tmp)
            else:
                with rendezvous() as store:
                    mp.spawn(megatron_worker, args=(b, store, path, tmp), nprocs=n)
            res = [torch.load(os.path.join(tmp, f"{n}_{r}.pt")) for r in range(n)]
            errs = {"loss": rel_err(res[0]["loss"], loss), "norm": rel_err(res[0]["norm"], norm)}
            for key in ("grads", "params"):
                for name, full in ref[key].items():
                    if shard_of(name, b, 0) is None:  # replicated: every rank's copy must match
                        errs[f"{key} {name}"] = max(rel_err(res[r][key][name], full) for r in range(n))
                    else:  # gather the shards into the whole tensor
                        got = torch.full_like(full, float("nan"))
                        for r in range(n):
                            got.index_copy_(*shard_of(name, b, r), res[r][key][name])
                        errs[f"{key} {name}"] = rel_err(got, full)
            worst = max(errs, key=errs.get)
            worst_grad = max((k for k in errs if k.startswith("grads")), key=errs.get)
            print(f"check: ranks {n}: loss {res[0]['loss']:.15g} (transformers {loss:.15g}); worst relative "
                  f"error {errs[worst]:.2e} ({worst}), of the gradients {errs[worst_grad]:.2e} ({worst_grad})",
                  file=sys.stderr)
            bad += [f"ranks {n}: {k}: relative error {e:.3e}" for k, e in errs.items() if not e <= 1e-10]
    print("check: FAILED\n" + "\n".join(bad) if bad else "check: OK")
    return 1 if bad else 0


def main():
    a = parse_args()
    if a.check:
        return check(a)
    if a.impl == "transformers":
        torch.set_num_threads(a.threads)
        _, forward_backward, clip_and_step = hf_model(a, getattr(torch, a.dtype))
        times, first_loss = timed(a, forward_backward, clip_and_step)
        report(a, statistics.median(times), rss_mib(), first_loss)
    elif a.ranks == 1:
        megatron_worker(0, a, None)
    else:
        with rendezvous() as store:
            mp.spawn(megatron_worker, args=(a, store), nprocs=a.ranks, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
