"""Run py-spy where reading another process's memory is not permitted (ptrace denied).

`python noptrace.py CMD [ARGS...]` installs a seccomp filter that fails ptrace, process_vm_readv,
process_vm_writev and lseek with EPERM, then execs the command. Denying the first three is what
Docker's default profile does without --cap-add SYS_PTRACE; py-spy then falls back to reading
/proc/PID/mem (lseek + read), which a Yama ptrace_scope or a missing capability would also deny,
so lseek is denied too. That breaks ordinary file seeks as well: wrap py-spy alone, never triage
(`TRIAGE_PY_SPY` points triage at a wrapper). x86_64 Linux only.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
AUDIT_ARCH_X86_64 = 0xC000003E
DENIED = (101, 310, 311, 8)  # ptrace, process_vm_readv, process_vm_writev, lseek on x86_64
LD_W_ABS, JEQ_K, RET_K = 0x20, 0x15, 0x06
ALLOW, EPERM = 0x7FFF0000, 0x00050000 | 1


def supported() -> bool:
    return sys.platform == "linux" and platform.machine() == "x86_64"


def _program() -> bytes:
    n = len(DENIED)
    code = [(LD_W_ABS, 0, 0, 4), (JEQ_K, 0, n + 1, AUDIT_ARCH_X86_64), (LD_W_ABS, 0, 0, 0)]
    code += [(JEQ_K, n - i, 0, nr) for i, nr in enumerate(DENIED)]
    code += [(RET_K, 0, 0, ALLOW), (RET_K, 0, 0, EPERM)]
    return b"".join(struct.pack("HBBI", *insn) for insn in code)


def deny_ptrace() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    program = _program()
    buffer = ctypes.create_string_buffer(program)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(program) // 8, ctypes.addressof(buffer))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


if __name__ == "__main__":
    deny_ptrace()
    os.execvp(sys.argv[1], sys.argv[1:])
