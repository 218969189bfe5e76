"""A training script whose distributed settings come from its config file, run as plain `python`.

Hang class: the group waits for ranks that were never started (no launcher; the world size is
read from the config, the rank defaults to 0).
Label: D1
Odd ranks: 1 2 3
Launch: python 1 world 4
Held out: session 10

The lab's template keeps distributed settings in the run config (`world_size: 4`,
`init_method: file://...` on the shared filesystem) and reads RANK from the environment with a
default of 0, "so it also runs on a laptop". Started as `python train.py` to debug a data change,
the one process becomes rank 0 of 4 and waits in `init_process_group` on the file store for
ranks 1 to 3.
"""

import json
import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn

DEFAULT_CONFIG = """
{
  "model": {"hidden": 128, "layers": 2},
  "optim": {"lr": 0.001, "batch_size": 32},
  "distributed": {"backend": "gloo", "world_size": 4, "init_file": "rendezvous-{job}"}
}
"""


def load_config() -> dict:
    path = os.environ.get("TRAIN_CONFIG", "")
    return json.loads(open(path).read() if path else DEFAULT_CONFIG)


def main() -> None:
    cfg = load_config()
    dcfg = cfg["distributed"]
    job = os.environ.get("SLURM_JOB_ID", str(os.getpid()))
    init_file = os.path.join(tempfile.gettempdir(), dcfg["init_file"].format(job=job))
    dist.init_process_group(
        dcfg["backend"],
        init_method=f"file://{init_file}",
        rank=int(os.environ.get("RANK", 0)),
        world_size=int(os.environ.get("WORLD_SIZE", dcfg["world_size"])),
    )
    hidden = cfg["model"]["hidden"]
    model = nn.Sequential(nn.Linear(16, hidden), nn.ReLU(), nn.Linear(hidden, 1))
    opt = torch.optim.Adam(model.parameters(), lr=cfg["optim"]["lr"])
    for _ in range(100):
        x = torch.randn(cfg["optim"]["batch_size"], 16)
        loss = model(x).pow(2).mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
