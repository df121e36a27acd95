"""Seccomp filter of the sandbox server, assembled as classic BPF with `struct`.

No native dependency: the program is a short list of `sock_filter`
instructions built here and installed by the server (through ctypes'
`prctl`, before it serves any request; every child inherits it). Refused
with EPERM: namespaces (`unshare`, `setns`, `clone` with a CLONE_NEW* flag),
`ptrace` and cross-process memory access, mounts, device nodes and FIFOs
(`mknod*`), hard and symbolic links, kernel modules, kexec, bpf,
perf_event_open, userfaultfd, keyrings, io_uring (its operations bypass
seccomp), swap, reboot, acct, quotactl, and every syscall of a foreign ABI
(i386 or x32 on x86_64). `clone3` returns ENOSYS so libc falls back to
`clone`, whose flags a classic filter can inspect.

Architectures: x86_64 and aarch64; elsewhere `program()` is None and the
server reports that no filter is installed.
"""

from __future__ import annotations

import os
import struct

_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_EPERM, _ENOSYS = 1, 38
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
_CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
_CLONE_NAMESPACES |= 0x20000000 | 0x40000000
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06

# name: (x86_64 number, aarch64 number); None where the call does not exist.
_DENIED = {
    "ptrace": (101, 117),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "chroot": (161, 51),
    "unshare": (272, 97),
    "setns": (308, 268),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "keyctl": (250, 219),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265),
    "mknod": (133, None),
    "mknodat": (259, 33),
    "link": (86, None),
    "linkat": (265, 37),
    "symlink": (88, None),
    "symlinkat": (266, 36),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "reboot": (169, 142),
    "acct": (163, 89),
    "quotactl": (179, 60),
}
# machine: (AUDIT_ARCH_*, column in _DENIED, clone, clone3, lowest foreign-ABI number)
_ARCHES = {
    "x86_64": (0xC000003E, 0, 56, 435, 0x40000000),
    "aarch64": (0xC00000B7, 1, 220, 435, None),
}


def program(machine: str | None = None) -> bytes | None:
    """The filter for `machine` (default: this one) as `struct sock_filter[]` bytes."""
    spec = _ARCHES.get(machine or os.uname().machine)
    if spec is None:
        return None
    audit_arch, column, clone, clone3, foreign = spec
    # (opcode, jump-if-true label, jump-if-false label, k); labels resolve below.
    code: list[tuple[int, str | None, str | None, int]] = [
        (_LD_W_ABS, None, None, 4),  # seccomp_data.arch
        (_JEQ, None, "deny", audit_arch),
        (_LD_W_ABS, None, None, 0),  # seccomp_data.nr
    ]
    if foreign is not None:
        code.append((_JGE, "deny", None, foreign))
    for numbers in _DENIED.values():
        if numbers[column] is not None:
            code.append((_JEQ, "deny", None, numbers[column]))
    code += [
        (_JEQ, "enosys", None, clone3),
        (_JEQ, None, "allow", clone),
        (_LD_W_ABS, None, None, 16),  # low 32 bits of args[0], clone's flags
        (_JSET, "deny", "allow", _CLONE_NAMESPACES),
    ]
    labels = {"allow": len(code), "deny": len(code) + 1, "enosys": len(code) + 2}
    code += [
        (_RET, None, None, _ALLOW),
        (_RET, None, None, _ERRNO | _EPERM),
        (_RET, None, None, _ERRNO | _ENOSYS),
    ]
    out = b""
    for i, (op, true, false, k) in enumerate(code):
        jt = labels[true] - i - 1 if true else 0
        jf = labels[false] - i - 1 if false else 0
        assert 0 <= jt < 256 and 0 <= jf < 256, (i, jt, jf)
        out += struct.pack("=HBBI", op, jt, jf, k)
    return out


def installer(filter_program: bytes):
    """A function that installs the filter on the calling process and returns its state.

    ctypes is imported now (the caller may still be privileged enough to read
    the Python install); the filter is installed later, after dropping root,
    and inherited by every child.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]

    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(filter_program, len(filter_program))
    prog = _Prog(len(filter_program) // 8, ctypes.addressof(buf))

    def install(_keep_alive=buf) -> str:
        if prctl(38, 1, None, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            return f"failed (no_new_privs errno {ctypes.get_errno()})"
        if prctl(22, 2, ctypes.addressof(prog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
            return f"failed (errno {ctypes.get_errno()})"
        return "installed"

    return install
