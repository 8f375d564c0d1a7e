"""nbgrader's folder exchange, hardened against the learners who use it (the roles' nbgrader_config.py
in hub/roles/ select these classes; autograder/tests/test_hub.py tries each hole as a learner).

nbgrader's exchange was not built against hostile students: a world-writable root where anyone makes
the course folder first, an inbound folder where a learner can place links for the instructor's
collect to follow, an owner check that only warns, and submission times written by the learner.
Here the folders are made by root when the class starts (hub/course_hub.py), owned by the
instructor, and each class below takes one of nbgrader's steps:

- every step (`FixedRoot`): the exchange's root is the administrator's, never created or re-moded
  by nbgrader (nbgrader wants it writable by all, which lets a learner make the course folder).
- Collect (`SafeCollect`): a submission counts only if its folder and everything in it is a plain
  folder or file owned by the learner it names (lstat, never following a link: hub/safe_copy.py),
  within bounds measured before anything else (files and folders, depth, bytes apparent or real),
  and holds what the pipeline needs (its secret, the assignment's notebooks, checked in the copy);
  its time is the file system's change time, never the learner's folder name or timestamp.txt.
  Anything else is refused, for that submission only, whatever the error: a warning in collect's
  log and a line in the course folder's collect-refused.log; nothing collected before is deleted
  unless a valid newer submission replaces it, and where the latest is refused, the learner's
  earlier submissions are tried in turn (a bad one costs its learner that one, not the honest one).
- Submit (`PrivateSubmit`): nbgrader makes a submission's files readable by everyone (0644) in a
  folder anyone may write (0777), hidden only by an unlisted inbound folder and a random name. Here
  they are shared with groups only: each learner has a group of their own that the instructor is a
  member of (hub/course_hub.py), and the inbound folder's group is the instructor's (set-group-ID).
  Inbound is also sticky: no learner can rename or delete another's submission.
- Release feedback (`PrivateFeedback`): nbgrader copies each learner's feedback page into one
  folder with the page's own mode (0644), hidden only by a secret name. Here each page belongs to
  its learner's group, 0640: the learner and the instructor read it, nobody else, even knowing the name.
  Learner by learner: one whose feedback cannot be released is warned about, the others get theirs.
"""
import contextlib
import datetime
import fnmatch
import glob
import grp
import os
import pwd
import shutil
import stat
import types
from pathlib import Path

import nbgrader.exchange.default.collect as base
import nbgrader.exchange.default.fetch_assignment as base_fetch
import nbgrader.exchange.default.fetch_feedback as base_fetch_feedback
import nbgrader.exchange.default.list as base_list
import nbgrader.exchange.default.release_assignment as base_release
import nbgrader.exchange.default.release_feedback as base_feedback
import nbgrader.exchange.default.submit as base_submit

from traitlets import Integer

from hub import safe_copy

SECRET = "submission_secret.txt"
REFUSED_LOG = "collect-refused.log"  # in the course folder: one line per submission collect refused


def _utc(seconds: float) -> datetime.datetime:
    """As nbgrader keeps times: UTC without a zone."""
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).replace(tzinfo=None)


class FixedRoot:
    def ensure_root(self):
        if not os.path.isdir(self.root):
            self.fail(f"No exchange at {self.root}: the class's administrator makes it when the class starts")


class SafeCollect(FixedRoot, base.ExchangeCollect):
    def _uid(self, name: str):
        try:
            return pwd.getpwnam(name).pw_uid
        except KeyError:
            return None

    max_entries = Integer(safe_copy.Bounds().entries, help="files and folders in one submission, at most").tag(config=True)
    max_depth = Integer(safe_copy.Bounds().depth, help="levels of folders in one submission, at most").tag(config=True)
    max_bytes = Integer(safe_copy.Bounds().bytes, help="bytes in one submission (apparent or real), at most").tag(config=True)

    @property
    def bounds(self) -> safe_copy.Bounds:
        return safe_copy.Bounds(self.max_entries, self.max_depth, self.max_bytes)

    def refused(self, name: str, student: str, why) -> None:
        """A submission left in inbound, for that learner only: a warning in collect's log (the
        formgrader shows it) and a line in the course folder's collect-refused.log, to read later."""
        self.log.warning("refused %s (claims to be %s's): %s", name, student, why)
        line = f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC\t{student}\t{name}\t{why}\n"
        with contextlib.suppress(OSError):
            with open(os.path.join(self.coursedir.root, REFUSED_LOG), "a") as f:
                f.write(line)

    def _records(self):
        """One record per submission that holds: learner, folder name, server time."""
        wanted = self.coursedir.student_id or "*"  # nbgrader's default: every learner
        with os.scandir(self.inbound_path) as entries:
            names = [e.name for e in entries]
        for name in names:
            student = name.split("+", 1)[0]
            if not name.startswith(f"{student}+{self.coursedir.assignment_id}+"):
                continue
            if not fnmatch.fnmatchcase(student, wanted):
                continue
            uid = self._uid(student)
            try:
                if uid is None:
                    raise safe_copy.Refused(f"no account named {student}")
                # Measured before anything else reads it: bounded, a folder at a time, no link followed.
                when = safe_copy.measure(os.path.join(self.inbound_path, name), uid, self.bounds,
                                         ignore=[*self.coursedir.ignore, "timestamp.txt"])
                # nbgrader's submit writes it, and release_feedback names the feedback page after it.
                secret = os.lstat(os.path.join(self.inbound_path, name, SECRET))
                if not stat.S_ISREG(secret.st_mode) or not 0 < secret.st_size <= 1024:
                    raise safe_copy.Refused(f"its {SECRET} is not a small file")
            except Exception as e:  # whatever it is, it stops this submission only
                self.refused(name, student, f"{type(e).__name__}: {e}")
                continue
            yield {"username": student, "filename": name, "uid": uid,
                   "timestamp": _utc(when)}

    def _required(self, folder: str) -> None:
        """What the rest of the pipeline needs, checked in the copy: the secret, and each of the
        assignment's released notebooks."""
        secret = os.path.join(folder, SECRET)
        if not os.path.isfile(secret) or not 0 < os.path.getsize(secret) <= 1024:
            raise safe_copy.Refused(f"no {SECRET} of at most 1024 bytes in the copy")
        released = self.coursedir.format_path(self.coursedir.release_directory, ".", self.coursedir.assignment_id)
        for notebook in glob.glob(os.path.join(released, "*.ipynb")):
            if not os.path.isfile(os.path.join(folder, os.path.basename(notebook))):
                raise safe_copy.Refused(f"no {os.path.basename(notebook)} in the copy")

    def init_src(self):
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        if not os.path.isdir(self.inbound_path):
            self.fail(f"Course not found: {self.inbound_path}")
        # nbgrader's choice (the latest, or the latest before the due date) over honest records only:
        # its init_src lists the folder with glob.glob; hand it ours.
        records = self._all = list(self._records())
        self._uids = {r["filename"]: r["uid"] for r in records}
        real_glob, real_record = base.glob, self._path_to_record
        by_name = {r["filename"]: r for r in records}
        base.glob = types.SimpleNamespace(glob=lambda pattern: [os.path.join(self.inbound_path, n) for n in by_name])
        self._path_to_record = lambda path: by_name[os.path.basename(path)]
        try:
            super().init_src()
        finally:
            base.glob, self._path_to_record = real_glob, real_record

    def copy_files(self):
        if not self.src_records:
            self.log.warning("No submissions of '%s' for course '%s' to collect", self.coursedir.assignment_id,
                             self.coursedir.course_id)
        for rec in self.src_records:
            # nbgrader's choice first; if the copy refuses it, the learner's earlier submissions in turn:
            # a bad submission costs its learner that submission, not the honest one before it.
            earlier = sorted((r for r in self._all if r["username"] == rec["username"] and r["timestamp"] < rec["timestamp"]),
                             key=lambda r: r["timestamp"], reverse=True)
            for candidate in [rec, *earlier]:
                if self._collect(candidate):
                    break

    def _collect(self, rec) -> bool:
        """Collect one submission; False when it is refused (then an earlier one may be tried)."""
        student, name = rec["username"], rec["filename"]
        dest = self.coursedir.format_path(self.coursedir.submitted_directory, student, self.coursedir.assignment_id)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        existing = self.coursedir.get_existing_timestamp(dest) if os.path.isdir(dest) else None
        if existing is not None and not (self.update and rec["timestamp"] > existing) and not (
                self.before_duedate and rec["timestamp"] != existing):
            self.log.info("No newer submission to collect: %s %s", student, self.coursedir.assignment_id)
            return True
        fresh = f"{dest}.collecting"
        shutil.rmtree(fresh, ignore_errors=True)
        try:
            when = safe_copy.copy_submission(os.path.join(self.inbound_path, name), fresh, self._uids[name],
                                             ignore=[*self.coursedir.ignore, "timestamp.txt"], bounds=self.bounds)
            self._required(fresh)
        except Exception as e:  # refused, never skipped in part: the copy is removed, the earlier one kept
            self.refused(name, student, f"{type(e).__name__}: {e}")
            shutil.rmtree(fresh, ignore_errors=True)
            return False
        when = max(_utc(when), rec["timestamp"])
        stamp = when.replace(tzinfo=datetime.timezone.utc).strftime(self.timestamp_format)
        with open(os.path.join(fresh, "timestamp.txt"), "w") as f:
            f.write(stamp)  # the server's time: what autograde compares with the due date
        self.log.info("%s submission: %s %s (received %s)", "Updating" if existing else "Collecting",
                      student, self.coursedir.assignment_id, stamp)
        if os.path.isdir(dest):
            shutil.rmtree(dest)
        os.rename(fresh, dest)
        return True


class Fetch(FixedRoot, base_fetch.ExchangeFetchAssignment):
    pass


class FetchFeedback(FixedRoot, base_fetch_feedback.ExchangeFetchFeedback):
    pass


class List(FixedRoot, base_list.ExchangeList):
    pass


class Release(FixedRoot, base_release.ExchangeReleaseAssignment):
    pass


class PrivateSubmit(FixedRoot, base_submit.ExchangeSubmit):
    def set_perms(self, dest, fileperms, dirperms):
        super().set_perms(dest, fileperms & ~0o007, dirperms & ~0o007)
        self._private = getattr(self, "_private", None) or dest

    def copy_files(self):
        super().copy_files()
        if getattr(self, "_private", None):  # nbgrader opened it to 0777 so the instructor may delete it
            os.chmod(self._private, 0o2770)


class PrivateFeedback(FixedRoot, base_feedback.ExchangeReleaseFeedback):
    def copy_files(self):
        # One learner at a time: a learner whose feedback cannot be released (no secret, say) gets a
        # warning, and the others theirs (nbgrader's loop stops at the first error, for the class).
        pattern, failed = self.src_path, []
        for folder in sorted(glob.glob(pattern)):
            self.src_path = folder
            try:
                self._copy_one()
            except Exception as e:
                failed.append(f"{Path(folder).parts[-2]}: {type(e).__name__}: {e}")
                self.log.warning("feedback of %s", failed[-1])
            finally:
                self.src_path = pattern
        if failed:  # reported once every other learner's feedback is out
            self.fail("feedback not released for " + "; ".join(failed))

    def _copy_one(self):
        # nbgrader copies feedback/<learner>/<assignment>/<notebook>.html to a temporary name with
        # shutil.copy, then renames it: give the copy to the learner's group as it is made.
        def copy(src, dest):
            shutil.copy(src, dest)
            learner = Path(src).parts[-3]
            try:
                gid = grp.getgrnam(learner).gr_gid
            except KeyError:  # not a learner of the hub's: nbgrader's own behaviour
                return dest
            os.chown(dest, -1, gid)
            os.chmod(dest, 0o640)
            return dest

        real = base_feedback.shutil
        base_feedback.shutil = types.SimpleNamespace(copy=copy, move=shutil.move)
        try:
            super().copy_files()
        finally:
            base_feedback.shutil = real
