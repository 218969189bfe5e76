"""D21 with torch.distributed.checkpoint: `dcp.save` called on rank 0 only, the way torch.save is.

dcp.save is a collective (every rank plans its shards, rank 0 gathers the plans): rank 0 waits
inside it for rank 1, which trains on and waits in its next all_reduce.
"""

import datetime
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    model = torch.nn.Linear(8, 8)
    folder = os.path.join(tempfile.gettempdir(), f"hang_dcp_{os.environ.get('MASTER_PORT', '0')}")
    for step in range(1000):
        dist.all_reduce(torch.ones(4) * step)  # the others wait here
        if rank == 0 and step == 2:
            dcp.save(model.state_dict(), checkpoint_id=folder)  # type: ignore[attr-defined]  # the suspect stops here
        time.sleep(0.01)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
