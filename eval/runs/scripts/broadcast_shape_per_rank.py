"""mistake: rank 0 broadcasts the freshly initialised embedding matrix, but each rank sized its
own receiving buffer from a vocabulary it built locally (rank 0's corpus has more words), so the
broadcast's tensors disagree in shape across ranks.
label: D19
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/broadcast_shape_per_rank.py
source: none known
"""

import torch
import torch.distributed as dist


def build_vocab(rank):
    words = "the cat sat on the mat with a hat".split()
    if rank == 0:
        words += ["dog", "log"]
    return sorted(set(words))


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    vocab = build_vocab(rank)
    emb = torch.randn(len(vocab), 8) if rank == 0 else torch.empty(len(vocab), 8)
    dist.broadcast(emb, src=0)
    print(f"rank {rank}: embedding {tuple(emb.shape)} synced", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
