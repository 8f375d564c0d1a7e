"""The second probe's attacks on the instructor's pipeline (review hub-probe-2.md N5, N3, N2, N10),
made again as the learner made them, by test_hub.py: submissions written straight into inbound that
stopped collect or feedback for the whole class, froze the instructor's server, or turned a few
KiB of the learner's disk into hundreds of MiB of the instructor's. Each must cost the class
nothing: collect refuses it with a note, the learner's honest submission is graded, the others'
too, and the instructor's server answers meanwhile (hub/safe_copy.py, hub/exchange.py,
hub/pipeline.py, hub/formgrader_guard.py).

    N5  20 000 empty files in one submission        plant_heavy: refused at the 201st entry, collect fast
    N3  1 100 nested folders                        plant_heavy: refused past 4 levels, collect goes on
    N2  a sparse 100 MB submission_secret.txt       plant_heavy: refused (release_feedback used to fail
        (and, here, a submission without its notebook)   for the class); release_isolated: one learner's
                                                    missing secret stops only that learner's release
    N10 three sparse files of 95 MB                 plant_heavy: refused (bytes counted apparent or real);
                                                    course_folder_mb: the instructor's folder stays small
    N5  the instructor's server blocked by a step   responsive: its API answers during an autograde,
                                                    which runs in the class's grading cgroup
"""
import subprocess
import threading
import time
from pathlib import Path

from autograder.tests.hub_attacks import COURSE_ID, as_user, stamp

HEAVY = {
    "many": "for i in range(20000): open(f'f{i:05d}.txt', 'w').close()",  # N5
    "deep": "import os\nfor i in range(1100):\n    os.mkdir('d'); os.chdir('d')",  # N3
    "bigsecret": "import os\nos.truncate('submission_secret.txt', 100000001)",  # N2
    "nonotebook": "import os, glob\n[os.remove(p) for p in glob.glob('*.ipynb')]",  # N2: what release needs, missing
    "sparse": "for i in range(3):\n    open(f'data{i}.bin', 'wb').truncate(95000000)",  # N10
}


def plant_heavy(hub, intruder: str, stem: str) -> dict:
    """Each of HEAVY as a submission of the intruder's, later than their honest one (so that collect
    would choose it), made with the learner's own account in the inbound folder; the names planted."""
    inbound = hub.exchange / COURSE_ID / "inbound"
    own = next(p for p in sorted(inbound.iterdir()) if p.name.startswith(f"{intruder}+{stem}+") and p.owner() == intruder)
    later = stamp(time.time() + 600)
    planted = {}
    for kind, code in HEAVY.items():
        folder = inbound / f"{intruder}+{stem}+{later}+{kind}"
        made = as_user(intruder, "bash", "-c", f"set -e; mkdir '{folder}'; cp '{own}'/* '{folder}/'; cd '{folder}'; "
                       f"python3 -c \"$0\"", code)
        assert made.returncode == 0, f"the learner could not even plant {kind}: {made.stderr[-500:]}"
        planted[kind] = folder.name
    return planted


def refused_all(hub, planted: dict) -> list[str]:
    """The planted submissions that collect did not refuse with a note in collect-refused.log."""
    log = Path(hub.course_root) / "collect-refused.log"
    noted = log.read_text() if log.exists() else ""
    return [kind for kind, name in planted.items() if name not in noted]


def course_folder_mb(hub) -> float:
    """What the instructor's course folder takes on its disk (N10: it grew to 820 MiB)."""
    used = subprocess.run(["du", "-s", "--block-size=1M", str(hub.course_root)], capture_output=True, text=True)
    return float(used.stdout.split()[0])


class responsive:
    """While the block runs (an autograde, say), the instructor's server is asked for its status every
    half second; `worst` is its slowest answer, and `confined` says whether a process of the
    instructor's ran in the class's grading cgroup (the step's), seen from outside."""

    def __init__(self, hub):
        self.hub, self.worst, self.confined, self._done = hub, 0.0, False, threading.Event()

    def _watch(self):
        import pwd
        uid = pwd.getpwnam(self.hub.instructor).pw_uid
        while not self._done.is_set():
            started = time.perf_counter()
            self.hub.api("GET", f"/user/{self.hub.instructor}/api/status", timeout=120)
            self.worst = max(self.worst, time.perf_counter() - started)
            for entry in Path("/proc").iterdir():
                try:
                    if entry.name.isdigit() and entry.stat().st_uid == uid and \
                            f"/{self.hub.cgroup}/grading\n" in (entry / "cgroup").read_text() + "\n":
                        self.confined = True
                except OSError:
                    continue
            self._done.wait(0.5)

    def __enter__(self):
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join(130)


def release_isolated(hub, call, stem: str, broken: str, others: list[str]) -> list[str]:
    """release_feedback for the class after `broken`'s collected feedback lost its secret (as an
    oversize secret once left it): what is wrong with the answer, or with the others' pages."""
    folder = Path(hub.course_root) / "feedback" / broken / stem
    (folder / "submission_secret.txt").unlink()
    released = hub.exchange / COURSE_ID / "feedback"
    before = {p.name: p.stat().st_mtime_ns for p in released.iterdir()}
    time.sleep(0.05)
    answer = call(hub, hub.instructor, "POST", f"/formgrader/api/assignment/{stem}/release_feedback")
    wrong = []
    if answer.get("success") or broken not in answer.get("error", ""):
        wrong.append(f"the failure is not reported as {broken}'s: {str(answer)[-500:]}")
    if any(name in answer.get("error", "") for name in others):
        wrong.append(f"another learner's release is reported as failed: {answer.get('error', '')[-500:]}")
    again = [p.name for p in released.iterdir() if p.stat().st_mtime_ns > before.get(p.name, 0)]
    if len(again) < len(others):
        wrong.append(f"only {len(again)} pages released again for {len(others)} other learners")
    return wrong
