"""The second probe's attacks on what learners shared of one machine (review hub-probe-2.md N1, N6,
W7-disk, W10', N9's configuration), made again as the learner made them, by test_hub.py: from the
learner's own kernel (through their server), and with their Unix account (`runuser`, a shell
outside any server). Each must fail (hub/private.py, hub/disks.py, hub/jupyterhub_config.py); N4,
from inside a graded notebook, is in hub_attacks.graded_probe.

    N1  the hub's log, writable from every server     LOG_FDS: no descriptor of a kernel or its server
                                                      names the hub's log, nor another server's
    N6  /tmp/torchinductor_<other>, made first        squat_code, then TMP_OF_VICTIM in the other's kernel
    W7  no disk limit per learner                     DISK: home and /tmp end at their size (ENOSPC)
    W10 IPC objects and /run/lock files outlive       ipc_code in a kernel and in a shell; after stop,
        the class                                     none is left (ipc_seen, checked by the fixture)
    (attempts() makes N1, N6, W7 and W10 with one run of each learner's kernel)
    N9  the learner's ~/.jupyter changes what their   plant_server_config, then config_ignored after a
        server serves (a page for the instructor)     restart: no static page, no startup code ran
"""
import json
import secrets
import sys
import urllib.error
import urllib.request
from pathlib import Path

from autograder.tests.hub_attacks import as_user, run_in_kernel

# N1 -----------------------------------------------------------------------------------------------
LOG_FDS = (
    "import json, os\n"
    "def fds(pid):\n"
    "    out = []\n"
    "    for fd in os.listdir(f'/proc/{pid}/fd'):\n"
    "        try:\n"
    "            out.append(os.readlink(f'/proc/{pid}/fd/{fd}'))\n"
    "        except OSError:\n"
    "            pass\n"
    "    return out\n"
    "print('@N1', json.dumps({'kernel': fds(os.getpid()), 'server': fds(os.getppid())}))\n")


def logs_held(out: dict, hub, learner: str) -> list[str]:
    """Descriptors of the learner's kernel and server that name a log other than the server's own."""
    own = str(hub.state / "logs" / f"{learner}.log")
    return [f"{who}: {target}" for who, targets in out.items() for target in targets
            if target.endswith(".log") and target != own]


# N6 -----------------------------------------------------------------------------------------------
def squat_code(victim: str) -> str:
    """The victim's torch cache folder, made first by the intruder (0777, a module in it)."""
    path = f"/tmp/torchinductor_{victim}"
    return (f"os.makedirs({path!r}, exist_ok=True)\nos.chmod({path!r}, 0o777)\n"
            f"open({path!r} + '/planted.py', 'w').write('import os')\n")


TMP_OF_VICTIM = (
    "import json, os\n"
    "from torch._inductor.runtime.cache_dir_utils import default_cache_dir\n"
    "path = default_cache_dir()\n"
    "st = os.stat(path) if os.path.exists(path) else None\n"
    "print('@N6', json.dumps({'path': path, 'owner': st and st.st_uid, 'me': os.getuid(),\n"
    "                  'planted': os.path.exists(os.path.join(path, 'planted.py')), 'tmp': sorted(os.listdir('/tmp'))}))\n")


def tmp_held(out: dict) -> list[str]:
    wrong = []
    if out["planted"] or (out["owner"] is not None and out["owner"] != out["me"]):
        wrong.append(f"the victim's torch cache {out['path']} is the intruder's (uid {out['owner']})")
    if any(name.startswith("torchinductor_") and name != Path(out["path"]).name for name in out["tmp"]):
        wrong.append(f"the victim's /tmp shows another's files: {out['tmp']}")
    return wrong


# W7 -----------------------------------------------------------------------------------------------
def disk_code(home_mb: int, tmp_mb: int) -> str:
    """Run in the learner's kernel: fill the home and /tmp past their sizes, 16 MiB at a time (each
    file under the file-size limit); what was written where, and the error that stopped it."""
    return (
        "out = {}\n"
        f"for where, limit in ((os.path.expanduser('~'), {home_mb}), ('/tmp', {tmp_mb})):\n"
        "    written, error, chunk = 0, None, b'\\0' * (16 << 20)\n"
        "    try:\n"
        "        for i in range(limit // 64 + 2):\n"
        "            with open(os.path.join(where, f'attention-fill{i}.bin'), 'wb') as f:\n"
        "                for _ in range(4):\n"
        "                    f.write(chunk); f.flush(); os.fsync(f.fileno()); written += 16\n"
        "    except OSError as e:\n"
        "        error = e.errno\n"
        "    for name in os.listdir(where):\n"
        "        if name.startswith('attention-fill'):\n"
        "            os.remove(os.path.join(where, name))\n"
        "    out[where] = [written, error]\n"
        "print('@W7', json.dumps(out))\n")


def disk_held(out: dict, home_mb: int, tmp_mb: int) -> list[str]:
    import errno
    wrong = []
    for where, (written, error) in out.items():
        limit = tmp_mb if where == "/tmp" else home_mb
        if error != errno.ENOSPC or written > limit:
            wrong.append(f"{where}: wrote {written} MiB past a limit of {limit} MiB (error {error})")
    return wrong


# W10 ----------------------------------------------------------------------------------------------
def ipc_code(key: int, lock: str) -> str:
    """System V shared memory (touched), a semaphore set and a message queue under `key`, `key`+1,
    `key`+2, and a file in /run/lock: what the learner tries to leave for the next owner of their uid."""
    return (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.shmat.restype = ctypes.c_void_p\n"
        f"shm = libc.shmget({key}, 1 << 20, 0o1666)\n"
        "at = libc.shmat(shm, None, 0)\n"
        "ctypes.memset(at, 7, 1 << 20); libc.shmdt(ctypes.c_void_p(at))\n"
        f"print('ids', shm, libc.semget({key + 1}, 1, 0o1666), libc.msgget({key + 2}, 0o1666))\n"
        f"open({lock!r}, 'w').write('left')\n")


def attempts(hub, victim: str, intruder: str, home_mb: int, tmp_mb: int) -> tuple[list[str], list[Path], list[int]]:
    """N1, N6, W7, W10 from the intruder's kernel (one run) and shell, then seen from the victim's
    kernel: what went wrong, the paths and IPC keys made outside any server (for after the class)."""
    key = 0x4C310000 + secrets.randbelow(1 << 16) * 32
    locks = [Path(f"/run/lock/attention-left-{hub.prefix}-{where}") for where in ("kernel", "shell")]
    squat = Path(f"/tmp/torchinductor_{victim}")
    said = run_in_kernel(hub, intruder, "import json, os\n" + LOG_FDS + squat_code(victim) + disk_code(home_mb, tmp_mb)
                         + ipc_code(key, str(locks[0])))
    shell = as_user(intruder, "sh", "-c", f"mkdir -m 0777 -p {squat} && touch {squat}/planted.py && python3 -c \"$0\"",
                    ipc_code(key + 16, str(locks[1])))
    seen = run_in_kernel(hub, victim, TMP_OF_VICTIM + "print('@W10', json.dumps(open('/proc/sysvipc/shm').read()))\n")
    out = {line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1]) for line in (said + seen).splitlines()
           if line.startswith("@")}
    wrong = [f"N1: {held}" for held in logs_held(out.get("@N1", {}), hub, intruder)] if "@N1" in out else ["N1: no answer"]
    wrong += tmp_held(out["@N6"]) if "@N6" in out else [f"N6: no answer: {seen[-500:]}"]
    wrong += disk_held(out["@W7"], home_mb, tmp_mb) if "@W7" in out else [f"W7: no answer: {said[-500:]}"]
    if "ids" not in said or " -1" in said.split("ids", 1)[1].splitlines()[0] or shell.returncode != 0:
        wrong.append(f"W10: the IPC objects were not even made: {said[-300:]} {shell.stderr[-300:]}")
    keys = [key + i for i in (0, 1, 2, 16, 17, 18)]
    if any(f" {k} " in f" {out.get('@W10', '')} " for k in keys):
        wrong.append("W10: a learner sees another's shared memory")
    return wrong, [squat, *locks], keys


def ipc_seen(keys) -> list[str]:
    """Entries of the machine's System V IPC (the host's namespace) under any of `keys`."""
    found = []
    for kind in ("shm", "sem", "msg"):
        for line in Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]:
            if int(line.split()[0]) in keys:
                found.append(f"{kind} {line.split()[0]}")
    return found


# N9 -----------------------------------------------------------------------------------------------
PAGE = "<!doctype html><title>plot</title><h1>my attention plot</h1>"


def plant_server_config(hub, learner: str) -> list[Path]:
    """What the learner writes in their home to change what their server serves or runs: the review's
    extra_static_paths (in ~/.jupyter and ~/.local/etc/jupyter) and code that Python would run at
    start from the user's site-packages; the files that code would leave if it ran."""
    home = Path(f"~{learner}").expanduser()
    site = home / ".local" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    markers = [home / "usercustomize-ran", home / "pth-ran"]
    config = json.dumps({"ServerApp": {"extra_static_paths": [str(home / "pub")]}})
    script = "\n".join([
        "set -e", f"mkdir -p {home}/.jupyter {home}/.local/etc/jupyter {home}/pub {site}",
        f"cat > {home}/.jupyter/jupyter_server_config.json <<'EOF'\n{config}\nEOF",
        f"cp {home}/.jupyter/jupyter_server_config.json {home}/.local/etc/jupyter/",
        f"cat > {home}/pub/plot.html <<'EOF'\n{PAGE}\nEOF",
        f"echo \"open('{markers[0]}', 'w').write('x')\" > {site}/usercustomize.py",
        f"echo \"import os; open('{markers[1]}', 'w').write('x')\" > {site}/attention.pth"])
    done = as_user(learner, "bash", "-c", script)
    assert done.returncode == 0, done.stderr
    return markers


def config_ignored(hub, learner: str, markers) -> list[str]:
    """After the learner's server restarted: its static page (fetched without logging in, as the
    review did) and the markers of code run at its start."""
    hub.api("DELETE", f"/hub/api/users/{learner}/server")
    hub.spawn([learner])
    wrong = [f"code from the learner's home ran in their server: {m}" for m in markers if m.exists()]
    request = hub.request(f"/user/{learner}/static/plot.html")
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            if "my attention plot" in answer.read().decode(errors="replace"):
                wrong.append("the learner's server serves a page of theirs from ~/.jupyter's extra_static_paths")
    except urllib.error.HTTPError:
        pass
    return wrong
