# triage eval (lint clean set): https://github.com/huggingface/accelerate/issues/1303
# Pasted in the issue (`main_process_first()` lets the other processes in before the main one leaves the
#   block); the thread: the context manager was wrong (flukeskywalker: "I have a working fix. Will submit
#   PR", accepted by the maintainers), the script is the intended use. Unmodified below this header.
from accelerate import Accelerator
from time import sleep
import os


def main():
    accelerator = Accelerator()
    with accelerator.main_process_first():
        print("HEY", accelerator.is_main_process)
        sleep(3)
        print("BYE", accelerator.is_main_process)


if __name__ == "__main__":
    main()
