# source: https://github.com/bytedance/ibot/issues/15
# established (fixed by the maintainers): under DDP every process saved the checkpoint, so the files
#   could not be loaded.
# expect: TRG023
# (a minimal reconstruction of the pattern)
import os

import torch
import torch.distributed as dist


def train(student, teacher, optimizer, loader, args):
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    for epoch in range(args.epochs):
        for images in loader:
            loss = student(images).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        save_dict = {"student": student.state_dict(), "teacher": teacher.state_dict(), "epoch": epoch + 1}
        torch.save(save_dict, os.path.join(args.output_dir, "checkpoint.pth"))
