"""mistake: the checkpoint was saved from the DDP wrapper (model.state_dict(), keys start with
`module.`), and the evaluation script loads it into the plain model.
label: none
first_rank: none
launch: python eval/runs/scripts/load_ddp_prefix.py
source: https://github.com/pytorch/pytorch/issues/3805
"""

import os
import tempfile

import torch


def build():
    return torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.ReLU(), torch.nn.Linear(10, 2))


def main():
    path = os.path.join(tempfile.gettempdir(), "runs7_ddp_ckpt.pt")
    # what the training job wrote: torch.save(ddp_model.state_dict(), path)
    torch.save({f"module.{k}": v for k, v in build().state_dict().items()}, path)
    model = build()
    model.load_state_dict(torch.load(path, map_location="cpu"))
    model.eval()
    print(model(torch.randn(1, 10)))


if __name__ == "__main__":
    main()
