"""mistake: a mixture-of-experts token dispatch with all_to_all_single, where each rank computes
its output split sizes from its own routing counts instead of exchanging them first, so the send
sizes on one rank do not match the receive sizes on the other.
label: D19
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/all_to_all_split_mismatch.py
source: none known
written: session 9, unseen
"""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tokens = torch.arange(6, dtype=torch.float32) + 10 * rank
    send_counts = [2, 4] if rank == 0 else [3, 3]
    recv_counts = send_counts  # assumed symmetric routing
    out = torch.empty(sum(recv_counts))
    dist.all_to_all_single(out, tokens, output_split_sizes=recv_counts, input_split_sizes=send_counts)
    print(f"rank {rank} got {out.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
