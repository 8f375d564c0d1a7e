"""The class's Unix accounts at the end: their processes killed, what they left in the shared
folders and System V IPC removed, their homes' disks taken away, the accounts and homes deleted
(hub/course_hub.py's stop())."""
import contextlib
import os
import pwd
import signal
import subprocess
import time
from pathlib import Path

from hub import disks, private


def _exists_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def run(*cmd, check=True, timeout=120):
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=timeout)


def private_log(path: Path):
    return open(path, "w", opener=lambda p, flags: os.open(p, flags, 0o600))


def _remove_user(name: str, shared=("/tmp", "/var/tmp", "/dev/shm", "/run/lock")):
    """Kill the account's processes (servers and kernels left by the hub), remove what it left in the
    `shared` (world-writable) folders and in System V IPC, take its home's disk away (hub/disks.py),
    then delete it and its home. userdel refuses while a process of the account is still going, so
    wait and retry."""
    entry = pwd.getpwnam(name)
    uid = entry.pw_uid
    deadline = time.monotonic() + 30
    while True:
        for pid in _pids_of(uid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _pids_of(uid, settle=5)
        private.remove_leftovers([uid], shared)
        disks.unmount(Path(entry.pw_dir))
        result = run("userdel", "--remove", name, check=False)
        if not _exists_user(name) or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


def _pids_of(uid: int, settle: float = 0.0) -> list[int]:
    """Live processes of `uid` (not zombies, which are dead already); with `settle`, wait up to that
    many seconds for them to go (a kernel killed through its parent's death takes a moment)."""
    deadline = time.monotonic() + settle
    while True:
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if entry.stat().st_uid == uid and (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                        pids.append(int(entry.name))
        if not pids or time.monotonic() >= deadline:
            return pids
        time.sleep(0.1)
