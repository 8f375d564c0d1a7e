"""A disk of its own for each account's home, and one for the exchange: size-limited file systems,
so that no learner fills the machine's disk (the hub's database, PostgreSQL, the other homes) and
the instructor's pipeline writes at most its own home's size (review W7-disk, N10).

Each is an ext4 file system in a sparse image file, STATE/disks/<name>.img (root's, 0600), mounted
through a loop device (nodev, nosuid) at the home or the exchange: its size is a hard bound, and
the image takes on the machine's disk only what is written in it. Where the machine has no loop
devices (a container without /dev/loop-control), a tmpfs of the same size is mounted instead: the
same bound, held in memory rather than on disk (it is emptied at stop either way, with the class).

Per-user quotas would let the learners share one file system (and bound each one's part of the
shared exchange); this machine's kernel has no quota format for ext4 (CONFIG_QFMT_V2 is off),
so the exchange is bounded as a whole. On Kubernetes each pod's volume has its size (KUBERNETES.md)."""
import contextlib
import os
import shutil
import subprocess
from pathlib import Path

from hub.runtime import mounted


def _run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def make(state: Path, name: str, mount_at: Path, size_mb: int, inode_bytes: int = 16384) -> str:
    """A file system of `size_mb` mounted at `mount_at` (an existing, empty folder); 'ext4' or 'tmpfs'."""
    disks = state / "disks"
    disks.mkdir(mode=0o700, exist_ok=True)
    image = disks / f"{name}.img"
    with open(image, "wb") as f:
        f.truncate(size_mb << 20)
    image.chmod(0o600)
    made = _run("mkfs.ext4", "-q", "-F", "-m", "0", "-i", str(inode_bytes), "-E", "root_owner=0:0", str(image))
    if made.returncode == 0 and _run("mount", "-o", "loop,nodev,nosuid", str(image), str(mount_at)).returncode == 0:
        with contextlib.suppress(OSError):
            (mount_at / "lost+found").rmdir()
        return "ext4"
    image.unlink()
    done = _run("mount", "-t", "tmpfs", "-o", f"size={size_mb}m,nodev,nosuid,mode=0755", "tmpfs", str(mount_at))
    if done.returncode != 0:
        raise RuntimeError(f"no file system for {mount_at}: {made.stderr.strip()} / {done.stderr.strip()}")
    return "tmpfs"


def home(state: Path, user: str, size_mb: int) -> str:
    """The account's home (made by useradd, with /etc/skel's files) moved onto a disk of its own."""
    import pwd
    entry = pwd.getpwnam(user)
    path = Path(entry.pw_dir)
    skel = state / f"skel-{user}"
    shutil.copytree(path, skel, symlinks=True)
    kind = make(state, user, path, size_mb)
    shutil.copytree(skel, path, symlinks=True, dirs_exist_ok=True)
    shutil.rmtree(skel)
    subprocess.run(["chown", "-R", f"{entry.pw_uid}:{entry.pw_gid}", str(path)], check=True)
    os.chmod(path, 0o700)
    return kind


def unmount(path: Path) -> bool:
    """Take the file system at `path` away (lazily, if a process still holds it); True when it is gone."""
    for how in (["umount"], ["umount", "--lazy"]):
        if mounted(path):
            _run(*how, str(path))
    return not mounted(path)
