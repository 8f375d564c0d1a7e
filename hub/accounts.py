"""The class's Unix accounts at the end: their processes killed, their files in the shared temporary
folders removed, the accounts and homes deleted (hub/course_hub.py's stop())."""
import contextlib
import os
import pwd
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path


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


def _remove_files_of(uid: int, tops=("/tmp", "/var/tmp", "/dev/shm")):
    """The account's files and folders in the shared temporary folders (the next account that gets
    its uid would own them), found with lstat: no link followed."""
    for top in tops:
        for folder, dirs, files in os.walk(top):
            for name in [*files, *dirs]:
                path = os.path.join(folder, name)
                with contextlib.suppress(OSError):
                    st = os.lstat(path)
                    if st.st_uid != uid:
                        continue
                    if stat.S_ISDIR(st.st_mode):
                        shutil.rmtree(path, ignore_errors=True)
                        dirs.remove(name)
                    else:
                        os.unlink(path)


def _remove_user(name: str):
    """Kill the account's processes (servers and kernels left by the hub), remove its files in /tmp,
    then delete it and its home. userdel refuses while a process of the account is still going, so
    wait and retry."""
    uid = pwd.getpwnam(name).pw_uid
    deadline = time.monotonic() + 30
    while True:
        for pid in _pids_of(uid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _pids_of(uid, settle=5)
        _remove_files_of(uid)
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
