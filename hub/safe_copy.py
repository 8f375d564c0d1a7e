"""Copying a learner's submission as the instructor without trusting anything in it
(hub/exchange.py's collect): no link is followed, every entry must belong to the learner, and the
time of the submission is the file system's, not the learner's.

Each folder is opened relative to its parent's descriptor with O_NOFOLLOW, each file with
O_NOFOLLOW | O_NONBLOCK and checked again on its descriptor (fstat), so a name swapped for a link
or a FIFO between the check and the open is refused too. The time is the latest change time (ctime)
of anything in the submission: the kernel sets it, touch and utime cannot move it back, so a
learner can make a submission look later, never earlier."""
import fnmatch
import os
import stat

FLAGS_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FLAGS_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Refused(Exception):
    """The submission holds something that is not the learner's own file or folder."""


def _check(st: os.stat_result, uid: int, what: str, kind) -> None:
    if not kind(st.st_mode):
        raise Refused(f"{what}: not a plain {'folder' if kind is stat.S_ISDIR else 'file'} (a link, a FIFO, a device?)")
    if st.st_uid != uid:
        raise Refused(f"{what}: owned by uid {st.st_uid}, not by the learner (uid {uid})")


def submission_time(path: str, uid: int) -> float:
    """The latest ctime in the submission at `path` (which must be the learner's folder), without reading it."""
    top = os.open(path, FLAGS_DIR)
    try:
        return _walk(top, path, uid, None, (), None)
    finally:
        os.close(top)


def copy_submission(path: str, dest: str, uid: int, ignore=(), max_file_bytes=None) -> float:
    """Copy the learner's folder `path` to a new folder `dest`; its latest ctime, read after the copy."""
    top = os.open(path, FLAGS_DIR)
    try:
        return _walk(top, path, uid, dest, ignore, max_file_bytes)
    finally:
        os.close(top)


def _walk(fd: int, what: str, uid: int, dest, ignore, max_file_bytes) -> float:
    st = os.fstat(fd)
    _check(st, uid, what, stat.S_ISDIR)
    latest = st.st_ctime
    if dest is not None:
        os.mkdir(dest, 0o750)
    for name in sorted(os.listdir(fd)):
        if any(fnmatch.fnmatch(name, pattern) for pattern in ignore):
            continue
        entry = os.stat(name, dir_fd=fd, follow_symlinks=False)
        where = os.path.join(what, name)
        if stat.S_ISDIR(entry.st_mode):
            child = os.open(name, FLAGS_DIR, dir_fd=fd)
            try:
                latest = max(latest, _walk(child, where, uid, dest and os.path.join(dest, name), ignore, max_file_bytes))
            finally:
                os.close(child)
            continue
        _check(entry, uid, where, stat.S_ISREG)
        latest = max(latest, entry.st_ctime)
        if dest is None:
            continue
        source = os.open(name, FLAGS_FILE, dir_fd=fd)
        try:
            opened = os.fstat(source)
            _check(opened, uid, where, stat.S_ISREG)
            if max_file_bytes is not None and opened.st_size > max_file_bytes:
                continue  # as nbgrader does with a file over CourseDirectory.max_file_size
            target = os.open(os.path.join(dest, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o640)
            try:
                while chunk := os.read(source, 1 << 20):
                    os.write(target, chunk)
            finally:
                os.close(target)
            latest = max(latest, os.fstat(source).st_ctime)
        finally:
            os.close(source)
    return max(latest, os.fstat(fd).st_ctime)
