# SPDX-License-Identifier: MIT
"""Where the ranks of a one-machine torch.distributed (gloo) peer meet: a file in a
directory of this job's own, not a TCP port.

A port found free by the parent and handed to the ranks can be taken by another
job before rank 0 binds it: CI saw "The server socket has failed to bind ...
Address already in use" with tests running side by side. A file nobody else
knows cannot be taken. Gloo's own connections still use ports, but ports the
kernel hands out at bind time, so they cannot clash.

    with rendezvous() as url:                 # in the parent
        mp.spawn(worker, args=(url,), nprocs=n)
    init_gloo(rank, n, url)                   # in each rank
"""
import contextlib, os, tempfile


@contextlib.contextmanager
def rendezvous():
    """A file:// URL in a fresh directory, removed with it when the block ends."""
    with tempfile.TemporaryDirectory(prefix="shardex-torch-rendezvous-") as d:
        yield "file://" + os.path.join(d, "store")


def init_gloo(rank, world_size, url):
    import torch.distributed as dist  # the callers exit 77 first when torch is missing
    dist.init_process_group("gloo", init_method=url, rank=rank, world_size=world_size)
