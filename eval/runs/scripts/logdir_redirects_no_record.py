"""mistake: the job runs with `--redirects 3 --log-dir` (output to per-rank files) and main() is
not wrapped in @record, so when every rank fails the terminal shows only the launcher's summary
(`error_file: <N/A>`), without any traceback.
label: P4
first_rank: none
launch: rm -rf /tmp/r8_logs && torchrun --redirects 3 --log-dir /tmp/r8_logs --nproc-per-node 4 eval/runs/scripts/logdir_redirects_no_record.py
source: none known
"""

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group("gloo")
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 3)))
    batch = torch.randn(8, 10)
    target = torch.randint(0, 3, (8,))
    loss = nn.functional.nll_loss(model(batch), target.float())
    loss.backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
