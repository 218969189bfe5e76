"""mistake: validation runs over a DistributedSampler(shuffle=False) of 101 samples on 2 ranks; the
sampler pads each rank's shard to the same length by repeating samples, so the gathered predictions
number 102, and the metric code's check that every sample was scored exactly once fails on rank 0.
The ranks are started by hand, one `python` per rank with env://.
label: D22
alternates: none
first_rank: 0
launch: MASTER_ADDR=127.0.0.1 RANK=0 WORLD_SIZE=2 python eval/runs/scripts/eval_sampler_padding_count.py & MASTER_ADDR=127.0.0.1 RANK=1 WORLD_SIZE=2 python eval/runs/scripts/eval_sampler_padding_count.py; wait
source: https://github.com/pytorch/pytorch/issues/25162
written: session 11, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank, world = dist.get_rank(), dist.get_world_size()
    ds = TensorDataset(torch.arange(101).float().unsqueeze(1), torch.arange(101))
    loader = DataLoader(ds, batch_size=16, sampler=DistributedSampler(ds, shuffle=False))
    model = torch.nn.Linear(1, 3)
    ids, preds = [], []
    with torch.no_grad():
        for x, idx in loader:
            preds.append(model(x).argmax(1))
            ids.append(idx)
    ids_t, preds_t = torch.cat(ids), torch.cat(preds)
    all_ids = [torch.empty_like(ids_t) for _ in range(world)]
    dist.all_gather(all_ids, ids_t)
    if rank == 0:
        scored = torch.cat(all_ids)
        print(f"scored {scored.numel()} predictions for {len(ds)} samples", flush=True)
        assert scored.numel() == len(ds), "some validation samples were scored twice"
        print("accuracy computed", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
