"""mistake: rank 0 builds the vocabulary from the raw corpus (slow, about 12 s here) and then shares
it with broadcast_object_list; the group was created with `timeout=timedelta(seconds=5)` (copied
from a test), so the other rank times out waiting in the broadcast although rank 0 was only slow.
The ranks are started by hand, one `python` per rank with env://.
label: MN3
alternates: D23
first_rank: none
launch: MASTER_ADDR=127.0.0.1 RANK=0 WORLD_SIZE=2 python eval/runs/scripts/rank0_vocab_broadcast_timeout.py & MASTER_ADDR=127.0.0.1 RANK=1 WORLD_SIZE=2 python eval/runs/scripts/rank0_vocab_broadcast_timeout.py; wait
source: https://github.com/huggingface/transformers/issues/17106
written: session 11c, unseen
"""

import time
from datetime import timedelta

import torch.distributed as dist


def build_vocab():
    time.sleep(12)  # tokenising the raw corpus
    return {w: i for i, w in enumerate(["<pad>", "<unk>", "the", "a", "of"])}


def main():
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=5))
    rank = dist.get_rank()
    obj = [build_vocab() if rank == 0 else None]
    dist.broadcast_object_list(obj, src=0)
    print(f"rank {rank}: vocab of {len(obj[0])} words", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
