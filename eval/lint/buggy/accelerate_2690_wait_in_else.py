# source: https://github.com/huggingface/accelerate/issues/2690
# established: wait_for_everyone() only in the `else` of `if accelerator.is_main_process:`; the main
#   process never reaches it and the other GPUs hang after saving.
# expect: TRG021
# (a minimal reconstruction of the pattern in the report)
from accelerate import Accelerator


def main(model, tokenizer, output_dir):
    accelerator = Accelerator()
    model = accelerator.prepare(model)
    if accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(model)
        unwrapped.save_pretrained(output_dir, safe_serialization=True)
        tokenizer.save_pretrained(output_dir)
    else:
        accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(None, None, "out")
