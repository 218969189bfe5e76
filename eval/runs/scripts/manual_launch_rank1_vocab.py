"""mistake: the two ranks are started by hand, one `python train.py` per machine, and each loads the
tokenizer from its own home directory; rank 1's copy is a newer version with added special tokens,
so its token ids run past the embedding table and rank 1 raises at its first batch while rank 0
waits in the gradient all-reduce.
label: D20
first_rank: 1
launch: MASTER_ADDR=127.0.0.1 RANK=0 WORLD_SIZE=2 python eval/runs/scripts/manual_launch_rank1_vocab.py & MASTER_ADDR=127.0.0.1 RANK=1 WORLD_SIZE=2 python eval/runs/scripts/manual_launch_rank1_vocab.py; wait
source: none known
written: session 9b, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn

MODEL_VOCAB = 1000


def tokenizer_size(rank):
    return 1000 if rank == 0 else 1004  # rank 1's tokenizer.json has 4 added tokens


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(MODEL_VOCAB, 16), nn.Flatten(), nn.Linear(16 * 6, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(rank)
    for step in range(3):
        ids = torch.randint(tokenizer_size(rank) - 8, tokenizer_size(rank), (4, 6), generator=gen)
        loss = model(ids).logsumexp(-1).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
