# source: https://github.com/huggingface/accelerate/issues/2733
# established by the thread (closed; "The code will hang"); the answer (muellerzr, a maintainer): "You
#   also need to call `gather_object` across every worker/GPU": the gather runs under
#   `if distributed_state.is_main_process:` only.
# expect: TRG021
# (the two snippets as pasted, one after the other, unmodified below this header)
distributed_state = Accelerator()
if distributed_state.is_main_process:
  print(gather_object(txt_out)[0])
  print(gather_object(txt_out)[1])
dist.gather_object(
  txt_out_across_devices if dist.get_rank() == 0 else None,
  txt_out,
  dst=0
)
