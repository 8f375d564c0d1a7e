"""A machine of one's own, as far as one machine allows: what each server of the class (a learner's,
the instructor's) gets that no other account shares. hub/limits.py's LimitedSpawner applies it as
root, just before the server drops to its account; hub/course_hub.py prepares and removes the rest.

    /tmp, /var/tmp, /dev/shm, /run/lock and any other folder that every account may write (found
    when the class starts, outside the class's own folders)
                        an empty tmpfs of its own, in a mount namespace of the server's, sized
                        (PRIVATE_MB), gone with the server; its pages count against the server's
                        memory cgroup. The account cannot unmount it (no CAP_SYS_ADMIN; in a user
                        namespace of its own the mounts are locked).
                        So no learner pre-makes another's /tmp/torchinductor_<name> (review N6).
    System V IPC        an IPC namespace of its own: shared memory, semaphores, queues die with it
    its output          STATE/logs/<name>.log, opened by the hub for it: never the hub's own log,
                        which every server and kernel used to inherit, writable (review N1)
    its home            a file system of its own (hub/disks.py)
What a class account may still leave behind (only from outside its server: a shell root opened
with `runuser`) is removed at stop: its files in every world-writable folder, its System V IPC
objects (remove_leftovers)."""
import contextlib
import ctypes
import os
import subprocess
from pathlib import Path

CLONE_NEWNS, CLONE_NEWIPC = 0x00020000, 0x08000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 2, 4, 16384, 1 << 18
PRIVATE_MB = 1024
# File systems that hold no folder an account could write to, or that are the kernel's.
VIRTUAL = {"proc", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue", "debugfs", "tracefs", "securityfs", "pstore",
           "bpf", "configfs", "fusectl", "hugetlbfs", "binfmt_misc", "autofs", "nsfs", "devtmpfs", "efivarfs"}

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def world_writable(outside=()) -> list[str]:
    """Every folder that any account may write, on every real file system of the machine, outermost
    only (what lies inside is hidden with it), except under `outside` (the class's own folders)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype not in VIRTUAL:
            points.append(fields[4].replace("\\040", " "))
    found = set()
    for point in sorted(set(points)):
        result = subprocess.run(["find", point, "-xdev", "-type", "d", "-perm", "-0002", "-prune"],
                                capture_output=True, text=True, timeout=300)
        found.update(p for p in result.stdout.splitlines() if p)
    skip = [str(Path(o)) for o in outside]
    found = [p for p in found if not any(p == s or p.startswith(s + "/") for s in skip)]
    return sorted(p for p in found if not any(p.startswith(q + "/") for q in found))


def enter(folders, size_mb: int = PRIVATE_MB) -> None:
    """In the server's process, as root, before it drops to the account (hub/limits.py): new mount
    and IPC namespaces, and an empty tmpfs of `size_mb` on each of `folders`."""
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare")
    _check(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    for folder in folders:
        if os.path.isdir(folder) and not os.path.islink(folder):
            _check(_libc.mount(b"tmpfs", folder.encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                               f"size={size_mb}m,mode=1777".encode()), f"mount tmpfs {folder}")


def server_log(folder: Path, name: str) -> int:
    """A descriptor of STATE/logs/<name>.log, appended to, for the server's stdout and stderr."""
    folder.mkdir(mode=0o700, exist_ok=True)
    return os.open(folder / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)


def _ipc_of(uids) -> list[tuple[str, str]]:
    """(ipcrm option, id) of every System V IPC object that a uid of `uids` owns or created."""
    found = []
    for kind, option in (("shm", "-m"), ("sem", "-s"), ("msg", "-q")):
        with contextlib.suppress(OSError):
            lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
            header = lines[0].split()
            for line in lines[1:]:
                row = dict(zip(header, line.split()))
                if int(row.get("uid", -1)) in uids or int(row.get("cuid", -1)) in uids:
                    found.append((option, row[header[1]]))
    return found


def remove_files_of(uid: int, folders) -> None:
    """The account's files and folders in `folders` (world-writable: the next account that gets its
    uid would own them), outermost first; find and rm walk any depth and follow no link."""
    for top in folders:
        found = subprocess.run(["find", top, "-xdev", "-mindepth", "1", "-uid", str(uid), "-prune", "-print0"],
                               capture_output=True, timeout=300).stdout
        for path in filter(None, found.split(b"\0")):
            subprocess.run(["rm", "-rf", "--one-file-system", "--", path], capture_output=True, timeout=300)


def remove_leftovers(uids, folders) -> None:
    """What class accounts left outside their servers: files in world-writable folders, IPC objects."""
    for uid in uids:
        remove_files_of(uid, folders)
    for option, ident in _ipc_of(set(uids)):
        subprocess.run(["ipcrm", option, ident], capture_output=True)
