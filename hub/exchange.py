"""nbgrader's exchange with two holes closed (the roles' nbgrader_config.py in hub/roles/ select
these classes; autograder/tests/test_hub.py tries both holes as a learner):

- Collect: a submission counts only if the learner it names owns its file. nbgrader's own
  `check_owner` only logs a warning and collects the file anyway, so a learner could submit in
  another learner's name (`nbgrader submit --student alice`) and replace their work.
- Submit: nbgrader makes a submission's files readable by everyone (0644) in a folder anyone may
  write (0777), hidden only by an unlisted inbound folder and a random name. Here they are shared
  with groups only: each learner has a group of their own that the instructor is a member of
  (hub/course_hub.py), and the inbound folder's group is the instructor's.
- Release feedback: nbgrader copies each learner's feedback page into one folder with the page's
  own mode (0644), hidden only by a secret name. Here each page belongs to its learner's group,
  0640: the learner and the instructor read it, nobody else, even knowing the name."""
import grp
import os
import pwd
import shutil
import types
from pathlib import Path

import nbgrader.exchange.default.collect as base
import nbgrader.exchange.default.release_feedback as base_feedback
import nbgrader.exchange.default.submit as base_submit


class OwnerCheckedCollect(base.ExchangeCollect):
    def _claim_holds(self, path: str) -> bool:
        claimed = os.path.basename(path).split("+", 1)[0]
        try:
            owner = pwd.getpwuid(os.stat(path).st_uid).pw_name
        except (KeyError, OSError):
            owner = None
        if owner != claimed:
            self.log.warning("skipped %s: it claims to be submitted by %s but is owned by %s", path, claimed, owner)
        return owner == claimed

    def init_src(self):
        # nbgrader lists the inbound folder with glob.glob inside init_src: list only honest files.
        real = base.glob
        base.glob = types.SimpleNamespace(glob=lambda pattern: [p for p in real.glob(pattern) if self._claim_holds(p)])
        try:
            super().init_src()
        finally:
            base.glob = real


class PrivateSubmit(base_submit.ExchangeSubmit):
    def set_perms(self, dest, fileperms, dirperms):
        super().set_perms(dest, fileperms & ~0o007, dirperms & ~0o007)
        self._private = getattr(self, "_private", None) or dest

    def copy_files(self):
        super().copy_files()
        if getattr(self, "_private", None):  # nbgrader opened it to 0777 so the instructor may delete it
            os.chmod(self._private, 0o2770)


class PrivateFeedback(base_feedback.ExchangeReleaseFeedback):
    def copy_files(self):
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
