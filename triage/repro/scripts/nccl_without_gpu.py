"""E9: the training script asks for backend="nccl" on a machine (or job) without a usable GPU: a
CPU-only wheel, a login node, a Slurm step without --gres, or CUDA_VISIBLE_DEVICES="" ."""

import torch.distributed as dist


def main() -> None:
    dist.init_process_group("nccl")  # hard-coded, as in many reference scripts
    print("initialised", dist.get_rank(), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
