# source: https://github.com/huggingface/accelerate/issues/325
# https://github.com/huggingface/transformers/pull/16947
# established by the thread (closed: only the config file is saved, not pytorch_model.bin, with 3 GPUs) and
#   the fix it led to (sgugger, transformers#16947): `save_pretrained` "is called on every process ...
#   the scripts with Accelerate (see this issue)", and the processes delete each other's files; only the
#   main process should write (`is_main_process=`). Here every process calls `save_pretrained` on the
#   same directory.
# expect: TRG023
# (the script as pasted, unmodified below this header)
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
