"""The seccomp filter every bwrap sandbox loads: a hand-assembled classic-BPF program.

Default allow; EPERM for the calls that let a sandboxed command reach outside its namespaces or
attack the kernel: ptrace and process_vm_readv/writev (reading the runtime or ssh-agent), io_uring
(bypasses syscall filtering), kexec, bpf, perf_event_open, userfaultfd, the kernel keyring,
socket(AF_VSOCK) (talks to the hypervisor/host, outside the network namespace), socket(AF_UNIX)
unless the policy allows Unix sockets (a path socket is reachable through a read-only mount: the
Docker daemon, ssh-agent, D-Bus, a tmux server or an editor's IPC socket would each be a way out;
`socketpair`, which only connects a process to itself, stays allowed), and the terminal
injection ioctls TIOCSTI/TIOCLINUX (bwrap's documented replacement for --new-session). x32
syscalls on x86_64 get EPERM; any other architecture (e.g. i386 `int 0x80` from a 64-bit
process) is killed, since its syscall numbers are not checked.

The Landlock-only backend (no bwrap: no namespaces of its own) loads a `strict` variant from
landlock-exec: it also refuses the calls that make namespaces or change mounts (unshare, setns,
mount and the new mount API, pivot_root, chroot, clone with a CLONE_NEW* flag; clone3, whose
flags sit in memory a filter cannot read, gets ENOSYS so libc falls back to clone) and, with the
network off, every socket family but AF_UNIX (when allowed): no UDP, no raw, no netlink.

Both variants answer `getpriority(NESTING_PROBE, 0)` with `NESTING_ERRNO` instead of EINVAL:
a process can ask the kernel whether tether's filter confines it (`inside_tether_sandbox`), so an
inherited `TETHER_SANDBOX` variable alone never switches the sandbox off.

bwrap reads the program from a file descriptor (`--seccomp FD`): `seccomp_fd` puts the bytes in
a memfd the caller passes through `pass_fds`. bwrap reads it to EOF, so one fd serves one spawn.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass

# Instruction classes and modes (linux/bpf_common.h).
_LD_W_ABS = 0x00 | 0x00 | 0x20
_JMP_JEQ_K = 0x05 | 0x10 | 0x00
_JMP_JGE_K = 0x05 | 0x30 | 0x00
_JMP_JSET_K = 0x05 | 0x40 | 0x00
_RET_K = 0x06 | 0x00

_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_EPERM = 0x00050000 | errno.EPERM
_RET_ENOSYS = 0x00050000 | errno.ENOSYS
NESTING_PROBE = 0x7E7E7E7E
NESTING_ERRNO = errno.ENOTRECOVERABLE
_RET_NESTING = 0x00050000 | NESTING_ERRNO
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
_CLONE_NEW_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

_AUDIT_ARCH_X86_64 = 0xC000003E
_AUDIT_ARCH_AARCH64 = 0xC00000B7
_X32_SYSCALL_BIT = 0x40000000

# struct seccomp_data: nr (u32) @0, arch (u32) @4, ip (u64) @8, args[6] (u64) @16.
# Both supported arches are little-endian, so an argument's low 32 bits sit at its offset.
_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARG0 = 16
_OFF_ARG1 = 24

_AF_UNIX = 1
_AF_VSOCK = 40
_TIOCSTI = 0x5412
_TIOCLINUX = 0x541C

DENIED_SYSCALLS: tuple[str, ...] = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kexec_load",
    "kexec_file_load",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "add_key",
    "request_key",
    "keyctl",
)

# Refused only by the strict (Landlock-only) variant: bwrap's own namespaces already bound these.
STRICT_DENIED_SYSCALLS: tuple[str, ...] = (
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
)

SYSCALL_NUMBERS: dict[str, dict[str, int]] = {
    "x86_64": {
        "ptrace": 101,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "kexec_load": 246,
        "kexec_file_load": 320,
        "bpf": 321,
        "perf_event_open": 298,
        "userfaultfd": 323,
        "add_key": 248,
        "request_key": 249,
        "keyctl": 250,
        "socket": 41,
        "ioctl": 16,
        "getpriority": 140,
        "clone": 56,
        "clone3": 435,
        "unshare": 272,
        "setns": 308,
        "mount": 165,
        "umount2": 166,
        "pivot_root": 155,
        "chroot": 161,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
    },
    "aarch64": {
        "ptrace": 117,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "kexec_load": 104,
        "kexec_file_load": 294,
        "bpf": 280,
        "perf_event_open": 241,
        "userfaultfd": 282,
        "add_key": 217,
        "request_key": 218,
        "keyctl": 219,
        "socket": 198,
        "ioctl": 29,
        "getpriority": 141,
        "clone": 220,
        "clone3": 435,
        "unshare": 97,
        "setns": 268,
        "mount": 40,
        "umount2": 39,
        "pivot_root": 41,
        "chroot": 51,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
    },
}
SUPPORTED_MACHINES: frozenset[str] = frozenset({"x86_64", "aarch64", "arm64"})


@dataclass(frozen=True, slots=True)
class _Insn:
    code: int
    k: int
    jt: str | None = None  # label jumped to when the test holds (None: next instruction)
    jf: str | None = None
    label: str | None = None  # label naming this instruction


def _ld(offset: int, label: str | None = None) -> _Insn:
    return _Insn(_LD_W_ABS, offset, label=label)


def _jeq(value: int, jt: str | None, jf: str | None = None) -> _Insn:
    return _Insn(_JMP_JEQ_K, value, jt, jf)


def _ret(value: int, label: str | None = None) -> _Insn:
    return _Insn(_RET_K, value, label=label)


def _arch_block(arch: str, unix_sockets: bool, strict: bool, network: bool) -> list[_Insn]:
    nr = SYSCALL_NUMBERS[arch]
    block = [_ld(_OFF_NR, label=arch)]
    if arch == "x86_64":
        block.append(_Insn(_JMP_JGE_K, _X32_SYSCALL_BIT, "eperm"))
    denied = DENIED_SYSCALLS + (STRICT_DENIED_SYSCALLS if strict else ())
    block += [_jeq(nr[name], "eperm") for name in denied]
    if strict:
        block += [_jeq(nr["clone3"], "enosys"), _jeq(nr["clone"], f"{arch}.clone")]
    block += [
        _jeq(nr["socket"], f"{arch}.socket"),
        _jeq(nr["ioctl"], f"{arch}.ioctl"),
        _jeq(nr["getpriority"], f"{arch}.getpriority"),
        _ret(_RET_ALLOW),
        _ld(_OFF_ARG0, label=f"{arch}.socket"),
        _jeq(_AF_VSOCK, "eperm"),
        *([] if unix_sockets else [_jeq(_AF_UNIX, "eperm")]),
    ]
    if strict and not network:
        # Only AF_UNIX (when allowed) is left: every network family is refused.
        block += [_jeq(_AF_UNIX, "allow") if unix_sockets else _ret(_RET_EPERM), _ret(_RET_EPERM)]
    else:
        block.append(_ret(_RET_ALLOW))
    block += [
        _ld(_OFF_ARG1, label=f"{arch}.ioctl"),
        _jeq(_TIOCSTI, "eperm"),
        _jeq(_TIOCLINUX, "eperm"),
        _ret(_RET_ALLOW),
        _ld(_OFF_ARG0, label=f"{arch}.getpriority"),
        _jeq(NESTING_PROBE, "nesting"),
        _ret(_RET_ALLOW),
    ]
    if strict:
        block += [
            _ld(_OFF_ARG0, label=f"{arch}.clone"),
            _Insn(_JMP_JSET_K, _CLONE_NEW_FLAGS, "eperm"),
            _ret(_RET_ALLOW),
        ]
    return block


def _assemble(program: Sequence[_Insn]) -> bytes:
    where = {insn.label: i for i, insn in enumerate(program) if insn.label is not None}

    def offset(i: int, label: str | None) -> int:
        if label is None:
            return 0
        distance = where[label] - i - 1
        if not 0 <= distance <= 255:
            raise ValueError(f"seccomp jump to {label} out of range ({distance})")
        return distance

    return b"".join(
        struct.pack("=HBBI", insn.code, offset(i, insn.jt), offset(i, insn.jf), insn.k)
        for i, insn in enumerate(program)
    )


def seccomp_program(
    *, unix_sockets: bool = False, strict: bool = False, network: bool = True
) -> bytes:
    """The filter as the kernel's `struct sock_filter[]` bytes (8 bytes per instruction);
    `unix_sockets` lets socket(AF_UNIX) through; `strict` is the Landlock-only variant (no
    namespaces, no mounts, and no network sockets unless `network`)."""
    program = [
        _ld(_OFF_ARCH),
        _jeq(_AUDIT_ARCH_X86_64, "x86_64"),
        _jeq(_AUDIT_ARCH_AARCH64, "aarch64"),
        _ret(_RET_KILL_PROCESS),
        *_arch_block("x86_64", unix_sockets, strict, network),
        *_arch_block("aarch64", unix_sockets, strict, network),
        _ret(_RET_EPERM, label="eperm"),
        _ret(_RET_ENOSYS, label="enosys"),
        _ret(_RET_NESTING, label="nesting"),
        _ret(_RET_ALLOW, label="allow"),
    ]
    return _assemble(program)


def inside_tether_sandbox() -> bool:
    """Whether tether's seccomp filter confines this process (the kernel answers, not the
    environment): `getpriority(NESTING_PROBE, 0)` fails with NESTING_ERRNO only under it."""
    import ctypes
    import platform

    numbers = SYSCALL_NUMBERS.get("aarch64" if platform.machine() == "arm64" else platform.machine())
    if numbers is None:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    ctypes.set_errno(0)
    result = libc.syscall(
        ctypes.c_long(numbers["getpriority"]), ctypes.c_long(NESTING_PROBE), ctypes.c_long(0)
    )
    return bool(result == -1 and ctypes.get_errno() == NESTING_ERRNO)


def seccomp_fd(program: bytes | None = None) -> int:
    """A fresh fd positioned at the start of `program` (default: `seccomp_program()`).

    The caller passes it in `pass_fds` and closes it after the spawn. Close-on-exec is set, so
    it reaches only the child that names it in `pass_fds`.
    """
    data = seccomp_program() if program is None else program
    try:
        fd = os.memfd_create("tether-seccomp", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return _pipe_fd(data)
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


def _pipe_fd(data: bytes) -> int:
    # Fallback without memfd: a pipe holds the whole program (well under the pipe buffer).
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)
    finally:
        os.close(write_end)
    return read_end
