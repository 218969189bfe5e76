# triage eval (lint clean set): https://github.com/huggingface/accelerate/issues/325
# https://github.com/huggingface/transformers/pull/16947
# Pasted in the issue (only the config file is saved, not pytorch_model.bin, with 3 GPUs). Collected as
#   buggy (TRG023) in batch 13d and measured so; relabelled on re-reading the fix it led to: sgugger's
#   transformers#16947 says checkpoint sharding "introduced a bug in `save_pretrained` for distributed
#   setups" (every process deleted the others' shard files) and fixes it in the library, so the root cause
#   is transformers'; the script's `save_pretrained(..., save_function=accelerator.save)` on every process
#   is the use Accelerate documented then (`accelerator.save` writes on the main process only).
#   Unmodified below this header.
import math
import torch
import transformers
from accelerate import Accelerator, notebook_launcher

def sample(model, accelerator):
    accelerator.wait_for_everyone()
    accelerator.print('Saving Checkpoint')
    unwrapped_model = accelerator.unwrap_model(model)
    unwrapped_model.save_pretrained('ckpts',save_function = accelerator.save)

def demo():
    accelerator = Accelerator()
    device = accelerator.device
    accelerator.print("DEVICES IN USE:")
    print(device)
    model = BertForPreTraining.from_pretrained('bert-base-uncased')
    model = accelerator.prepare(model)
    sample(model,accelerator)

notebook_launcher(demo, num_processes=3)
