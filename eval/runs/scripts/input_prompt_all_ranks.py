"""mistake: the script asks before overwriting an existing output directory, `input("... overwrite?
[y/N] ")`, with no rank guard; under torchrun the workers have no terminal to read from (here, as
when the job runs in the background or under a scheduler, stdin is empty), so every rank fails at
the prompt.
label: none
alternates: P8
first_rank: none
launch: mkdir -p /tmp/r11_out && torchrun --nproc-per-node 2 eval/runs/scripts/input_prompt_all_ranks.py
source: none known
written: session 11, unseen
"""

import os

import torch
import torch.distributed as dist

OUT = "/tmp/r11_out"


def main():
    dist.init_process_group("gloo")
    if os.path.isdir(OUT):
        answer = input(f"{OUT} exists, overwrite? [y/N] ")
        if answer.strip().lower() != "y":
            raise SystemExit("aborted")
    model = torch.nn.Linear(4, 1)
    torch.save(model.state_dict(), os.path.join(OUT, "model.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
