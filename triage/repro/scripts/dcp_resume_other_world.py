"""D15 (resume at another world size): training state whose shapes depend on the world size (a
hand-sharded embedding, like a ZeRO/FSDP flat shard) is saved with torch.distributed.checkpoint by
two ranks, then the job is resumed with one process. DCP cannot reshard plain tensors: the saved
shard no longer fits, and the load fails."""

import datetime
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict_loader import load
from torch.distributed.checkpoint.state_dict_saver import save

ROWS = 16


def state(world: int, rank: int) -> dict[str, object]:
    shard = torch.full((ROWS // world, 4), float(rank))  # this rank's rows of the embedding
    return {"model": {"embedding.shard": shard}, "step": torch.tensor(100)}


def main() -> None:
    where = str(Path(os.environ.get("TRIAGE_REPRO_CHECKPOINT", "ckpt")).with_suffix("")) + "-dcp"
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    rank, world = dist.get_rank(), dist.get_world_size()
    save(state(world, rank), checkpoint_id=where)
    print(f"rank {rank}: saved step 100 at world size {world}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if rank != 0:
        return
    # The resumed job: one process (the other node is gone), same training code.
    print("resuming with world size 1 ...", flush=True)
    store = dist.FileStore(where + ".store", 1)  # type: ignore[attr-defined]
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=20))
    resumed = state(1, 0)
    load(resumed, checkpoint_id=where)
    step = resumed["step"]
    assert isinstance(step, torch.Tensor)
    print("resumed at step", int(step), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
