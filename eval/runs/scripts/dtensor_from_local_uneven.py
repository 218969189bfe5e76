"""mistake: each rank builds its shard of an embedding table itself (rows split with
`torch.chunk`-like arithmetic that gives rank 0 5 rows of 9 and rank 1 4) and wraps it with
DTensor.from_local(..., [Shard(0)]) on a 1-D DeviceMesh, which assumes even shards unless `shape=`
is given; `full_tensor()` then all-gathers shards of different sizes. Per-rank log files
(`--redirects 3 --log-dir`), main wrapped in @record.
label: D19
alternates: E6
first_rank: none
launch: rm -rf /tmp/s12_dt_logs && torchrun --redirects 3 --log-dir /tmp/s12_dt_logs --nproc-per-node 2 eval/runs/scripts/dtensor_from_local_uneven.py
source: https://github.com/pytorch/pytorch/issues/115310
written: session 12, unseen
"""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.tensor import DTensor, Shard

VOCAB, DIM = 9, 4


@record
def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    rows = (VOCAB + world - 1) // world
    start = rank * rows
    local = torch.randn(min(rows, VOCAB - start), DIM)
    table = DTensor.from_local(local, mesh, [Shard(0)])
    full = table.full_tensor()
    print(f"rank {rank}: full table {tuple(full.shape)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
