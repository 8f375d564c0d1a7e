"""A grading kernel's world of its own (Linux namespaces, no privilege needed): autograder/sandbox.py
calls isolate() as the throwaway account, before ipykernel starts.

What the kernel then sees and can reach:
    processes   a PID namespace whose first process is the kernel: when it ends, the kernel kills
                every process left in it (a double-forked, setsid daemon included)
    files       every file system read-only; /tmp, /var/tmp, /dev/shm and HOME empty private tmpfs
                that vanish with it; the folder of its connection file and sockets bound back in
    network     none: a network namespace with only a loopback; the kernel talks to the grader over
                Unix sockets (jupyter_client's ipc transport) in that folder
    IPC         System V and POSIX message queues of its own
So a graded notebook can neither leave anything behind (a startup file, a daemon, a file in /tmp)
nor hand anything (the hidden tests it is sent) to another account while it runs.

The kernel's account is mapped to itself in the user namespace: the capabilities that come with a
new namespace are lost at the execve of the kernel, and the mounts made here are locked together for
any namespace the learner's code makes (mount_namespaces(7)), so it cannot unmount the tmpfs.
Where unprivileged user namespaces are off (some hardened kernels, Ubuntu 24.04's AppArmor default)
isolate() raises: grading then refuses to start rather than run unconfined.
"""
import ctypes
import errno
import os
from pathlib import Path

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
CLONE_NEWNET, CLONE_NEWIPC = 0x40000000, 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND = 32, 1024, 2048, 4096
MS_REC, MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 16384, 1 << 18, 1 << 21, 1 << 24
# Mount options that a remount must repeat (the kernel locks them on mounts from a more privileged namespace).
KEPT = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
        "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME}
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")
TMPFS_MB = 512

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data=None):
    _check(_libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(), flags,
                       data and data.encode()), f"mount {target}")


def _write(path: str, text: str):
    with open(path, "w") as f:
        f.write(text)


def _mounts():
    """(mount point, per-mount options) of this mount namespace, parents before children."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        yield fields[4].replace("\\040", " "), fields[5].split(",")


def enter_namespaces():
    """New user, mount, PID, network and IPC namespaces, this account mapped to itself. The PID
    namespace takes effect for the next child: call fork() after this."""
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC), "unshare")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def seal_file_system(writable: str | None, readable=()):
    """In the child that is the PID namespace's first process: private empty /tmp, /var/tmp and
    /dev/shm, with `writable` (the connection file's folder) and `readable` (the course's runtime,
    when it lies in /tmp) bound back at their own paths; a /proc of this PID namespace; every other
    mount read-only."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here reaches the machine's mounts
    back = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in [writable, *readable] if path]
    fresh = set()
    for path in PRIVATE_TMP:
        if os.path.isdir(path) and not os.path.islink(path):
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={TMPFS_MB}m,mode=1777")
            fresh.add(path)
    for path, fd in back:  # each its own mount: rw for `writable` (not remounted below), read-only for the rest
        os.makedirs(path, mode=0o755, exist_ok=True)  # inside the private /tmp, where it lay there
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)
    if writable:
        fresh.add(writable)
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        fresh.add("/proc")
    except OSError:
        pass  # the machine's /proc stays: it shows other processes, but the PID namespace still ends them
    for point, options in list(_mounts()):
        if point in fresh or point == "/proc" or point.startswith("/proc/") or "ro" in options:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | sum(KEPT[o] for o in options if o in KEPT)
        try:
            _mount(None, point, None, flags)
        except OSError as e:  # a mount the namespace cannot see through (e.g. under another's 0700 folder)
            if e.errno not in (errno.EACCES, errno.ENOENT):
                raise


def die_with_parent():
    PR_SET_PDEATHSIG = 1
    import signal
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
