"""Limits on each learner's own server, enforced by the kernel: memory, CPU, processes, file size
(and, for every server, a machine of its own: hub/private.py; a disk of its own: hub/disks.py).

JupyterHub's LocalProcessSpawner ignores `mem_limit` and `cpu_limit`: one learner's notebook could
take the machine's memory and cores from the whole class, during an exam. LimitedSpawner starts each
server (and so everything it starts: kernels, terminals, Validate) inside a cgroup of its own and
under resource limits, set as root just before the server drops to the learner's account:

    cgroup v2 (systemd machines, Kubernetes nodes)   memory.max, memory.swap.max = 0, pids.max, cpu.max
    cgroup v1 (this kind of machine: no systemd)     memory.limit_in_bytes (+memsw), pids.max, cpu.cfs_quota_us
    rlimits, everywhere                              RLIMIT_NPROC (the account's processes and threads),
                                                     RLIMIT_FSIZE (one file), RLIMIT_DATA (one process's
                                                     memory), RLIMIT_CORE = 0
Without cgroups (macOS, a container without its cgroup folder) only the rlimits hold: memory then
per process, CPU not at all. What a deployment uses instead: The Littlest JupyterHub's systemdspawner
(MemoryMax, CPUQuota, TasksMax: cgroup v2 through systemd), Zero to JupyterHub's
singleuser.memory/cpu limits (the pod's cgroup). hub/course_hub.py removes the cgroups at the end."""
import os
import resource
import subprocess
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Dict, Int, List, Set, Unicode

from hub import private

CGROUP = Path("/sys/fs/cgroup")
V1 = ("memory", "pids", "cpu")
DEFAULTS = {"memory_mb": 4096, "cpus": 1.0, "processes": 512, "file_mb": 1024, "private_mb": 1024}
PERIOD_US = 100_000


def cgroup_version() -> int:
    """2 or 1 where this process may make cgroups with memory, pids and cpu; 0 where not."""
    if (CGROUP / "cgroup.controllers").exists():
        have = (CGROUP / "cgroup.controllers").read_text().split()
        return 2 if all(c in have for c in V1) and os.access(CGROUP, os.W_OK) else 0
    return 1 if all(os.access(CGROUP / c, os.W_OK) for c in V1) else 0


def _folders(parent: str, user: str) -> list[Path]:
    if cgroup_version() == 2:
        return [CGROUP / parent / user]
    return [CGROUP / c / parent / user for c in V1] if cgroup_version() == 1 else []


def make_cgroup(parent: str, user: str, limits: dict) -> list[Path]:
    """The user's cgroup(s) under `parent`, with the limits set; the cgroup.procs files to join."""
    version, memory = cgroup_version(), limits["memory_mb"] << 20
    quota = int(limits["cpus"] * PERIOD_US)
    if version == 2:
        (CGROUP / parent).mkdir(exist_ok=True)
        (CGROUP / parent / "cgroup.subtree_control").write_text("+memory +pids +cpu")
        folder = CGROUP / parent / user
        folder.mkdir(exist_ok=True)
        for name, value in (("memory.max", memory), ("memory.swap.max", 0), ("pids.max", limits["processes"]),
                            ("cpu.max", f"{quota} {PERIOD_US}")):
            if (folder / name).exists():
                (folder / name).write_text(str(value))
        return [folder / "cgroup.procs"]
    if version == 1:
        memory_folder, pids_folder, cpu_folder = _folders(parent, user)
        for folder in (memory_folder, pids_folder, cpu_folder):
            folder.mkdir(parents=True, exist_ok=True)
        (memory_folder / "memory.limit_in_bytes").write_text(str(memory))
        if (memory_folder / "memory.memsw.limit_in_bytes").exists():  # no swapping past it either
            (memory_folder / "memory.memsw.limit_in_bytes").write_text(str(memory))
        (pids_folder / "pids.max").write_text(str(limits["processes"]))
        (cpu_folder / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (cpu_folder / "cpu.cfs_quota_us").write_text(str(quota))
        return [f / "cgroup.procs" for f in (memory_folder, pids_folder, cpu_folder)]
    return []


def grading_cgroup(parent: str, grader: str, limits: dict) -> list[str]:
    """One cgroup for all grading work together, its cgroup.procs delegated to the grading account
    and its group, so that autograder/sandbox.py, running as it, moves the kernel in, and the
    instructor's pipeline (a member of that group: hub/pipeline.py) its steps; the files to write (none
    where this is not cgroup v1: under v2 moving a process also needs write access to the common
    ancestor, which the hub does not delegate, so there only the kernels' rlimits hold)."""
    if cgroup_version() != 1:
        return []
    import pwd
    account = pwd.getpwnam(grader)
    procs = make_cgroup(parent, "grading", limits)
    for path in procs:
        os.chown(path, account.pw_uid, account.pw_gid)
        os.chmod(path, 0o664)
    return [str(p) for p in procs]


def remove_cgroups(parent: str) -> None:
    """The class's cgroups, once their processes are gone (an empty cgroup is removed with rmdir)."""
    tops = [CGROUP / parent] if cgroup_version() == 2 else [CGROUP / c / parent for c in V1]
    for top in tops:
        if top.is_dir():
            for leaf in top.iterdir():
                if leaf.is_dir():
                    leaf.rmdir()
            top.rmdir()


def set_rlimits(limits: dict) -> None:
    """Soft and hard, so that the learner's code cannot raise them."""
    for which, value in ((resource.RLIMIT_NPROC, limits["processes"]), (resource.RLIMIT_FSIZE, limits["file_mb"] << 20),
                         (resource.RLIMIT_DATA, limits["memory_mb"] << 20), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(which, (value, value))


class LimitedSpawner(LocalProcessSpawner):
    """Each server in its cgroup and under its rlimits (the learners'), and every server on a machine
    of its own (hub/private.py: private /tmp and the like, its own IPC, its own log)."""
    limits = Dict(DEFAULTS, help="memory_mb, cpus, processes, file_mb of each user's server").tag(config=True)
    cgroup_parent = Unicode("attention-hub", help="the cgroup that holds one cgroup per user").tag(config=True)
    unlimited = Set(help="users whose servers get no limits (the instructor's, which grades)").tag(config=True)
    private_folders = List(help="world-writable folders each server gets a tmpfs of its own on").tag(config=True)
    private_mb = Int(private.PRIVATE_MB, help="size of each of those tmpfs").tag(config=True)
    log_folder = Unicode("", help="where each server's output goes, one file per user").tag(config=True)

    def make_preexec_fn(self, name):
        drop_to_user = super().make_preexec_fn(name)
        limited = name not in self.unlimited
        limits = {**DEFAULTS, **self.limits}
        join = make_cgroup(self.cgroup_parent, name, limits) if limited else []  # in the hub, as root
        folders, size = list(self.private_folders), self.private_mb

        def preexec():  # in the server's process, still root: the account cannot undo any of it
            for procs in join:
                with open(procs, "w") as f:
                    f.write(str(os.getpid()))
            private.enter(folders, size)
            if limited:
                set_rlimits(limits)
            os.umask(0o022)
            drop_to_user()
        return preexec

    async def start(self):
        # The server's output to a file of its own: JupyterHub would hand it the hub's log.
        log = private.server_log(Path(self.log_folder), self.user.name) if self.log_folder else None
        if log is not None:
            self.popen_kwargs = {"stdin": subprocess.DEVNULL, "stdout": log, "stderr": log}
        try:
            return await super().start()
        finally:
            if log is not None:
                os.close(log)
