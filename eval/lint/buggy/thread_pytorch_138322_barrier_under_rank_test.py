# source: https://github.com/pytorch/pytorch/issues/138322
# established by the report's own output (closed, labelled oncall: distributed, triaged): "the process
#   with the rank of 3 will exit as it does nothing operation, and the other processes will hang on the
#   barrier call" (until the one-minute timeout): the barrier runs under `if rank != 3:`.
# expect: TRG021
# (the first of the two programs pasted, unmodified below this header; the second adds a barrier after
#   the `if` and is not reproduced)
import time
import os
import torch
from datetime import timedelta

rank = int(os.getenv("RANK", "0"))
torch.distributed.init_process_group("nccl", timeout=timedelta(minutes=1))

if rank != 3:
    torch.distributed.barrier()

print(f"{rank} Done.")
