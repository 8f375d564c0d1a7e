"""One class of this course on this machine: JupyterHub with one instructor and N learners as real
Unix accounts, nbgrader's exchange, the course's nbgrader config and grader, and the gradebook in
a PostgreSQL server of its own. Run as root (accounts are created, servers spawned as them):

    make hub LEARNERS=3          # = .venv/bin/python -m hub.course_hub --learners 3

It prints the URL and the accounts, and runs until Ctrl-C, which stops the hub and PostgreSQL and
removes what it made: the accounts and their homes, the exchange, the state folder. A local
demonstration and the harness of autograder/tests/test_hub.py; for a class that lasts, see
hub/KUBERNETES.md and the README's instructor section.

What is where (STATE and everything in it root's, 0600/0700, but runtime/ and exchange/):
    STATE/hub.json, accounts.json          ports, accounts, paths; passwords
    STATE/jupyterhub.log, .sqlite, ...     the hub's log, database, cookie secret (the hub runs with umask 077)
    STATE/logs/<name>.log                  each server's output, never the hub's log (hub/private.py)
    STATE/runtime/                         all the accounts may read of the course (hub/runtime.py):
                                           the venv (bound read-only), utils/, autograder/, hub/
    STATE/disks/<name>.img                 each home's disk, and the exchange's (hub/disks.py: ext4
                                           on a loop device, mounted at the home and at STATE/exchange)
    STATE/exchange/                        nbgrader's exchange, made here and not by nbgrader
                                           (hub/exchange.py): root's 0755; the course folder, outbound
                                           (0755), inbound (3733: sticky, set-group-ID, not listable)
                                           and feedback (0711) the instructor's
    STATE/grading-run/                     a 16 MiB tmpfs: the grading kernels' connection folders
    PREFIX-grader, /etc/sudoers.d/attention-hub-PREFIX
                                           the account grading kernels run as (no home), and the one
                                           sudo rule that lets the instructor start them as it
    STATE/pg/, STATE/pg-run/               PostgreSQL: data (postgres), socket (peer authentication)
    ~INSTRUCTOR/attention-course/          the course folder: source/ from solutions/, release/, ...
    cgroups attention-hub-PREFIX/<user>    each learner's server's memory, CPU and process limits, and
            attention-hub-PREFIX/grading   all grading work's together (hub/limits.py)
Each server (hub/private.py) has a private tmpfs on every folder that all accounts may write (so
STATE must lie in none of them: not in /tmp) and an IPC namespace of its own; the hub is at
http://localhost:PORT and each server at http://<name>.localhost:PORT, an origin of its own.
While the hub runs, the checkout is readable by root only (0700: its solutions/, .git, build/ and
feedback/ hold the answers), and the folders above the venv's Python (e.g. /root for pyenv) are
made traversable (o+x) so that the accounts can run it; both are restored at the end, and what the
accounts left in world-writable folders and System V IPC is removed with the accounts.
"""
import argparse
import contextlib
import fcntl
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from hub import disks, limits, postgres, private, runtime  # noqa: E402
from hub.hub_api import HubAPI  # noqa: E402
from hub.postgres import pg_bin  # noqa: E402,F401
from hub.accounts import _exists_user, _pids_of, _remove_user, private_log  # noqa: E402,F401

REPO = Path(__file__).resolve().parent.parent
HUB = REPO / "hub"
CHP = REPO / "build" / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"
COURSE_ID = "attention-course"
DATABASE = "attention"
LOCK = "/tmp/attention-course-hub.lock"
DISK_MB = {"learner": 2048, "instructor": 8192, "exchange": 2048}
GRADING_RUN_MB = 16


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def missing() -> str | None:
    """What this machine lacks to run a class, in one line (None: nothing)."""
    if os.name != "posix" or os.geteuid() != 0:
        return "not root (accounts are created and servers spawned as them)"
    for tool in ("useradd", "userdel", "runuser", "sudo", "visudo", "unshare", "ipcrm", "find", "mount"):
        if not shutil.which(tool):
            return f"no `{tool}` program"
    if subprocess.run(["unshare", "--mount", "--ipc", "true"], capture_output=True).returncode != 0:
        return "cannot make mount and IPC namespaces (each server's private /tmp: hub/private.py)"
    if not CHP.exists():
        return f"no configurable-http-proxy at {CHP.relative_to(REPO)} (make hub-proxy: npm install)"
    if not (REPO / ".venv" / "bin" / "jupyterhub-singleuser").exists():
        return "no jupyterhub in .venv (pip install -r requirements.txt)"
    if pg_bin() is None:
        return "no PostgreSQL server programs (apt-get install postgresql)"
    if not any(_exists_user(u) for u in ("postgres",)):
        return "no `postgres` account to run PostgreSQL as"
    return None


def run(*cmd, user=None, check=True, **kw):
    if user:
        cmd = ("runuser", "-u", user, "--", *cmd)
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=kw.pop("timeout", 120), **kw)


class CourseHub(HubAPI):
    """Set up with start(), taken down with stop(); stop() undoes whatever start() got to."""

    def __init__(self, state: Path, prefix: str, learners: int, port: int | None = None, server_limits=None,
                 disk_mb: dict | None = None):
        self.state, self.prefix = Path(state), prefix
        self.runtime = self.state / "runtime"
        self.limits = {**limits.DEFAULTS, **(server_limits or {})}
        # Each learner's home, the instructor's (the course folder and everything grading writes), the exchange.
        self.disk_mb = {**DISK_MB, **(disk_mb or {})}
        self.cgroup = f"attention-hub-{prefix}"
        self.instructor = f"{prefix}-teacher"
        self.grader = f"{prefix}-grader"  # runs the learners' code while the instructor grades (autograder/sandbox.py)
        self.sudoers = Path("/etc/sudoers.d") / f"attention-hub-{prefix}"
        self.learners = [f"{prefix}-learner{i}" for i in range(1, learners + 1)]
        self.port = port or free_port()
        self.domain = "localhost"  # the hub at http://localhost:PORT, each server at http://<name>.localhost:PORT
        self.url = f"http://{self.domain}:{self.port}"
        self.service_token = secrets.token_hex(16)
        self.passwords = {name: secrets.token_urlsafe(9) for name in [self.instructor, *self.learners]}
        self.exchange = self.state / "exchange"
        self.created_users, self._undo, self.procs, self.grading_cgroups = [], [], [], []
        self.pg_port = free_port()

    # Accounts and permissions -------------------------------------------------------------
    def _add_user(self, name: str, shell: str = "/bin/bash", disk_mb: int = 0):
        """An account; with `disk_mb`, a home on a disk of its own of that size (hub/disks.py)."""
        where = ["--create-home"] if disk_mb else ["--no-create-home", "--home-dir", "/nonexistent"]
        run("useradd", *where, "--shell", shell, "--user-group", name)
        self.created_users.append(name)
        if disk_mb:
            self.disk_kind = disks.home(self.state, name, disk_mb)

    def _seal_repo(self):
        """The accounts' only way to the course is STATE/runtime: the checkout closed (0700), the folders
        above the venv's interpreter opened (o+x, e.g. /root for pyenv); undone by stop()."""
        python = (REPO / ".venv" / "bin" / "python").resolve()  # the interpreter the venv links to (e.g. pyenv's)
        for folder in [*reversed(python.parent.parent.parents), python.parent.parent]:
            mode = folder.stat().st_mode
            if not mode & stat.S_IXOTH:
                os.chmod(folder, mode | stat.S_IXOTH)
                self._undo.append((folder, mode))
        mode = REPO.stat().st_mode
        os.chmod(REPO, mode & ~0o077)
        self._undo.append((REPO, mode))
        runtime.build(REPO, self.runtime)

    def _exchange(self):
        """Made here, before any account exists, so that no learner makes the course folder first."""
        teacher = pwd.getpwnam(self.instructor)
        self.exchange.mkdir(mode=0o755)
        disks.make(self.state, "exchange", self.exchange, self.disk_mb["exchange"], inode_bytes=4096)  # bounded as a whole
        os.chmod(self.exchange, 0o755)
        course = self.exchange / COURSE_ID
        for folder, mode in ((course, 0o755), (course / "outbound", 0o755), (course / "inbound", 0o3733),
                             (course / "feedback", 0o711)):
            folder.mkdir()
            os.chown(folder, teacher.pw_uid, teacher.pw_gid)
            os.chmod(folder, mode)

    def _add_grader(self):
        """The throwaway account that grading kernels run as: no login, no password; the instructor
        may start autograder/sandbox.py as it through sudo (that command only) and shares a group
        with it for the kernel's connection file."""
        from autograder.sandbox import sudoers_rule
        self._add_user(self.grader, shell="/usr/sbin/nologin")
        run("usermod", "--append", "--groups", self.grader, self.instructor)
        draft = self.state / "sudoers"
        draft.write_text(sudoers_rule(self.instructor, self.grader, self.runtime))
        check = run("visudo", "-c", "-f", str(draft), check=False)
        if check.returncode != 0:
            raise RuntimeError(f"the sudoers rule does not parse: {check.stdout} {check.stderr}")
        draft.chmod(0o440)
        shutil.move(str(draft), self.sudoers)
        # All grading kernels together: the course's memory limit twice over, every core, 512 processes.
        from autograder.prestart import DEFAULT_MEMORY_MB
        self.grading_cgroups = limits.grading_cgroup(self.cgroup, self.grader, {
            "memory_mb": 2 * DEFAULT_MEMORY_MB, "cpus": float(os.cpu_count() or 1), "processes": 512, "file_mb": 256})
        # The grading kernels' connection folders (sockets, kernel.json): the one place graded code may
        # write outside its own tmpfs, here a small tmpfs of the class's, not the machine's disk.
        self.grading_run = self.state / "grading-run"
        self.grading_run.mkdir(mode=0o750)
        grader = pwd.getpwnam(self.grader)
        run("mount", "-t", "tmpfs", "-o", f"size={GRADING_RUN_MB}m,nodev,nosuid,noexec,mode=0750,"
            f"uid={pwd.getpwnam(self.instructor).pw_uid},gid={grader.pw_gid}", "tmpfs", str(self.grading_run))

    # PostgreSQL -----------------------------------------------------------------------------
    def _start_postgres(self):
        proc, self.gradebook = postgres.start(self.state, self.pg_port, self.instructor, DATABASE)
        self.procs.append(proc)

    # The course -----------------------------------------------------------------------------
    def _course_folder(self, stems):
        home = Path(pwd.getpwnam(self.instructor).pw_dir)
        self.course_root = home / COURSE_ID
        for stem in stems:
            target = self.course_root / "source" / stem / f"{stem}.ipynb"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / "solutions" / f"{stem}.ipynb", target)
        run("chown", "-R", f"{self.instructor}:{self.instructor}", str(self.course_root))

    def start(self, stems=("01_dot_product_attention",)):
        why = missing()
        if why:
            raise RuntimeError(why)
        # One class at a time per machine: two would undo each other's path permissions.
        self._lock = open(LOCK, "a")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.close()
            self._lock = None
            raise RuntimeError(f"another class is running on this machine (make hub or test_hub holds {LOCK}): stop it first")
        self.state.mkdir(mode=0o711)
        # Each server's private tmpfs goes on every folder anyone may write (hub/private.py), found
        # before the class makes its own; the class's state must not lie in one of them.
        self.private_folders = private.world_writable(outside=[self.state])
        if any(self.state == Path(f) or Path(f) in self.state.parents for f in self.private_folders):
            raise RuntimeError(f"{self.state} lies in a folder every server gets a private copy of: choose another")
        (self.state / "logs").mkdir(mode=0o700)  # each server's output (hub/private.py)
        self._seal_repo()
        self._add_user(self.instructor, disk_mb=self.disk_mb["instructor"])
        self._exchange()  # before any learner exists
        for name in self.learners:
            self._add_user(name, disk_mb=self.disk_mb["learner"])
            run("usermod", "--append", "--groups", name, self.instructor)  # how the instructor reads their submissions
        self._add_grader()
        self._start_postgres()
        self._course_folder(stems)
        accounts = self.state / "accounts.json"
        accounts.touch(mode=0o600)
        accounts.write_text(json.dumps(self.passwords))
        (self.state / "hub.json").write_text(json.dumps({
            "repo": str(REPO), "runtime": str(self.runtime), "limits": self.limits, "cgroup": self.cgroup,
            "port": self.port, "domain": self.domain, "hub_port": free_port(), "proxy_api_port": free_port(),
            "private_folders": self.private_folders, "grading_run": str(self.grading_run),
            "chp": str(CHP), "instructor": self.instructor, "learners": self.learners, "grader": self.grader,
            "exchange": str(self.exchange), "gradebook": self.gradebook, "grading_cgroups": self.grading_cgroups,
            "course_root": str(self.course_root),
            "service_token": self.service_token}))
        (self.state / "hub.json").chmod(0o600)
        env = {**os.environ, "ATTENTION_HUB_STATE": str(self.state),
               "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        proc = subprocess.Popen([str(REPO / ".venv" / "bin" / "jupyterhub"), "-f", str(HUB / "jupyterhub_config.py")],
                                cwd=self.state, env=env, stdout=subprocess.DEVNULL, umask=0o077,
                                stderr=private_log(self.state / "jupyterhub.log"), start_new_session=True)
        self.procs.append(proc)
        deadline = time.monotonic() + 120
        while True:
            try:
                self.api("GET", "/hub/api/")
                return self
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("JupyterHub did not start: " + self.log()[-2000:])
                time.sleep(0.5)

    # Taking it down -------------------------------------------------------------------------
    def stop(self):
        for proc in reversed(self.procs):  # the hub first (its spawned servers stop with it), then PostgreSQL
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shared = getattr(self, "private_folders", None) or ["/tmp", "/var/tmp", "/dev/shm", "/run/lock"]
        for name in self.created_users:
            _remove_user(name, shared)  # what it left in shared folders and IPC, its home's disk, the account
        for mount in (getattr(self, "grading_run", None), self.exchange):
            if mount is not None:
                disks.unmount(mount)
        with contextlib.suppress(OSError):
            limits.remove_cgroups(self.cgroup)
        self.sudoers.unlink(missing_ok=True)
        for path, mode in reversed(self._undo):
            os.chmod(path, mode)
        self._undo.clear()
        unmounted = runtime.unmount(self.runtime) and not any(
            disks.mounted(p) for p in (self.exchange, self.state / "grading-run"))
        if getattr(self, "_lock", None):
            if unmounted:  # never rmtree through a mount: it would delete the checkout's venv
                shutil.rmtree(self.state, ignore_errors=True)
            else:
                print(f"make hub: {self.runtime / '.venv'} is still mounted; {self.state} left in place", file=sys.stderr)
            self._lock.close()  # releases the lock
            self._lock = None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hub.course_hub", description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=3)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--prefix", default="attention")
    parser.add_argument("--state", default="/srv/attention-hub")
    args = parser.parse_args(argv)
    why = missing()
    if why:
        print(f"make hub: {why}", file=sys.stderr)
        return 2
    hub = CourseHub(Path(args.state), args.prefix, args.learners, port=args.port)
    # Ctrl-C and SIGTERM (kill, timeout, a service manager) both stop the class and remove what it made,
    # also where the shell that started it set SIGINT to be ignored (a background job).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: signal.default_int_handler(signal.SIGINT, None))
    try:
        hub.start(stems=sorted(p.stem for p in (REPO / "solutions").glob("*.ipynb")))
        print(f"JupyterHub for the course: {hub.url}  (Ctrl-C stops it and removes the accounts)")
        for name, password in hub.passwords.items():
            print(f"  {'instructor' if name == hub.instructor else 'learner':<10}  {name:<24} password {password}")
        print(f"  grading kernels run as {hub.grader} (no log-in), through /etc/sudoers.d/{hub.sudoers.name}")
        print(f"  each server at http://<name>.{hub.domain}:{hub.port}; homes and the exchange on disks of their own "
              f"({getattr(hub, 'disk_kind', 'ext4')}: {hub.disk_mb} MiB)")
        while all(p.poll() is None for p in hub.procs):
            time.sleep(1)
        print("JupyterHub or PostgreSQL stopped; see the log above", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        hub.stop()


if __name__ == "__main__":
    sys.exit(main())
