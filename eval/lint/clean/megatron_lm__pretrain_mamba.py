# triage eval (lint clean set): https://github.com/NVIDIA/Megatron-LM/blob/d98e8a64ddf34856e74b24714e3bedb2f5a39553/pretrain_mamba.py
# Licence: BSD-3-Clause (c) NVIDIA CORPORATION; the file below is unmodified.
# Copyright (c) 2025-2026, NVIDIA CORPORATION.  All rights reserved.
"""Backward-compatible wrapper for pretrain_hybrid.py.

Deprecated. Use pretrain_hybrid.py instead.
"""
import os
import runpy
import warnings

warnings.warn(
    "pretrain_mamba.py has been deprecated. Use pretrain_hybrid.py instead.",
    DeprecationWarning,
    stacklevel=2,
)

if __name__ == "__main__":
    # Execute pretrain_hybrid.py as if it were invoked directly.
    _this_dir = os.path.dirname(os.path.abspath(__file__))
    runpy.run_path(os.path.join(_this_dir, "pretrain_hybrid.py"), run_name="__main__")
