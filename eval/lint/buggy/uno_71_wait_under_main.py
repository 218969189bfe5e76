# source: https://github.com/bytedance/UNO/issues/71
# established: accelerator.wait_for_everyone() inside a block guarded by accelerator.is_main_process
#   hangs at the first checkpoint (the reporter traced it to that conflict).
# expect: TRG021
# (a minimal reconstruction of the pattern in the report)
import os

from accelerate import Accelerator


def train(dit, loader, optimizer, args):
    accelerator = Accelerator()
    dit, optimizer, loader = accelerator.prepare(dit, optimizer, loader)
    global_step = 0
    for batch in loader:
        loss = dit(batch).mean()
        accelerator.backward(loss)
        optimizer.step()
        global_step += 1
        if accelerator.sync_gradients and accelerator.is_main_process and global_step % args.checkpointing_steps == 0:
            save_path = os.path.join(args.project_dir, f"checkpoint-{global_step}")
            os.makedirs(save_path, exist_ok=True)
            accelerator.wait_for_everyone()
            state = accelerator.unwrap_model(dit).state_dict()
