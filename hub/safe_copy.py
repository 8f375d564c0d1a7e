"""Copying a learner's submission as the instructor without trusting anything in it
(hub/exchange.py's collect): no link is followed, every entry must belong to the learner, the
submission must fit within bounds, and the time of the submission is the file system's, not the
learner's.

Bounds: a submission is measured before anything else, and refused as soon as it passes one:
entries (files and folders), depth of folders, and bytes, each file counted at the larger of its
apparent size and the blocks it holds (a sparse file of 95 MB costs the learner 56 KiB but would be
copied as 95 MB). The walk is iterative, with one open folder per level at most (a recursive walk
of 1 100 nested folders raised RecursionError and stopped collect for the class, review N3), and
stops reading a folder at the entry past the bound (20 000 empty files, N5, are not all listed).

Each folder is opened relative to its parent's descriptor with O_NOFOLLOW, each file with
O_NOFOLLOW | O_NONBLOCK and checked again on its descriptor (fstat), so a name swapped for a link
or a FIFO between the check and the open is refused too; the copy counts again what it writes, so
a file that grows after the measure is refused too. The time is the latest change time (ctime) of
anything in the submission: the kernel sets it, touch and utime cannot move it back, so a learner
can make a submission look later, never earlier."""
import fnmatch
import os
import stat
from typing import NamedTuple

FLAGS_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FLAGS_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Refused(Exception):
    """The submission holds something that is not the learner's own file or folder, or too much."""


class Bounds(NamedTuple):
    entries: int = 200  # a notebook, its secret, a few files of the learner's
    depth: int = 4  # folders within the submission's folder
    bytes: int = 50_000_000  # all files together (apparent or real size, whichever is larger)


def _check(st: os.stat_result, uid: int, what: str, kind) -> None:
    if not kind(st.st_mode):
        raise Refused(f"{what}: not a plain {'folder' if kind is stat.S_ISDIR else 'file'} (a link, a FIFO, a device?)")
    if st.st_uid != uid:
        raise Refused(f"{what}: owned by uid {st.st_uid}, not by the learner (uid {uid})")


def _cost(st: os.stat_result) -> int:
    return max(st.st_size, st.st_blocks * 512)


def _entries(path: str, uid: int, bounds: Bounds, ignore):
    """Every entry of the submission at `path`, parents before children, as
    (relative path, lstat, parent folder's descriptor, name); raises Refused past any bound."""
    top = os.open(path, FLAGS_DIR)
    stack, count, total = [(top, "", 0)], 0, 0
    try:
        while stack:
            fd, rel, depth = stack.pop()
            try:
                _check(os.fstat(fd), uid, os.path.join(path, rel), stat.S_ISDIR)
                names = []
                with os.scandir(fd) as listing:
                    for entry in listing:
                        count += 1
                        if count > bounds.entries:
                            raise Refused(f"more than {bounds.entries} files and folders")
                        names.append(entry.name)
                yield rel, os.fstat(fd), None, None
                for name in sorted(names):
                    if any(fnmatch.fnmatch(name, pattern) for pattern in ignore):
                        continue
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    where = os.path.join(rel, name)
                    if stat.S_ISDIR(st.st_mode):
                        if depth + 1 > bounds.depth:
                            raise Refused(f"{where}: folders deeper than {bounds.depth} levels")
                        stack.append((os.open(name, FLAGS_DIR, dir_fd=fd), where, depth + 1))
                        continue
                    _check(st, uid, os.path.join(path, where), stat.S_ISREG)
                    total += _cost(st)
                    if total > bounds.bytes:
                        raise Refused(f"more than {bounds.bytes} bytes (apparent or real size; at {where})")
                    yield where, st, fd, name
            finally:
                os.close(fd)
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def measure(path: str, uid: int, bounds: Bounds = Bounds(), ignore=()) -> float:
    """The submission at `path` (the learner's folder) within `bounds`, without reading a file; its latest ctime."""
    return max(st.st_ctime for _, st, _, _ in _entries(path, uid, bounds, ignore))


def copy_submission(path: str, dest: str, uid: int, ignore=(), bounds: Bounds = Bounds()) -> float:
    """Copy the learner's folder `path` to a new folder `dest`; its latest ctime, read after the copy."""
    latest, written = 0.0, 0
    for rel, st, fd, name in _entries(path, uid, bounds, ignore):
        latest = max(latest, st.st_ctime)
        if fd is None:
            os.mkdir(os.path.join(dest, rel), 0o750)
            continue
        source = os.open(name, FLAGS_FILE, dir_fd=fd)
        try:
            _check(os.fstat(source), uid, os.path.join(path, rel), stat.S_ISREG)
            target = os.open(os.path.join(dest, rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o640)
            try:
                while chunk := os.read(source, 1 << 20):
                    written += len(chunk)
                    if written > bounds.bytes:
                        raise Refused(f"more than {bounds.bytes} bytes once copied (at {rel})")
                    os.write(target, chunk)
            finally:
                os.close(target)
            latest = max(latest, os.fstat(source).st_ctime)
        finally:
            os.close(source)
    return latest
