# source: https://github.com/huggingface/diffusers/issues/2606
# established (labelled bug; DeepSpeed's docs: every process must call save_checkpoint): with
#   DeepSpeed, accelerator.save_state() under `if accelerator.is_main_process:` hangs the job.
# expect: TRG036
# (a minimal reconstruction of the pattern)
import os

from accelerate import Accelerator


def main(unet, optimizer, loader, args):
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    unet, optimizer, loader = accelerator.prepare(unet, optimizer, loader)
    global_step = 0
    for batch in loader:
        with accelerator.accumulate(unet):
            loss = unet(batch).mean()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        if accelerator.sync_gradients:
            global_step += 1
            if accelerator.is_main_process:
                if global_step % args.checkpointing_steps == 0:
                    accelerator.save_state(os.path.join(args.output_dir, f"checkpoint-{global_step}"))


if __name__ == "__main__":
    main(None, None, [], None)
