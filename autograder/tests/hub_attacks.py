"""The ways one learner took the course's JupyterHub apart, each made again the way it was made, as a
learner, by test_hub.py: with the learner's Unix account (a terminal, by `runuser`), through the
learner's own Jupyter server (its kernels), from inside the learner's graded notebook, or in the
instructor's Chromium. Each must fail; a comment names the weakness.

The first probe (issue "A class a learner cannot break"), here:
    1 stored XSS in the formgrader      XSS_CELLS (in the graded notebook), formgrader_page_has_no_script,
                                        and test_hub.instructor_browser (the instructor's Chromium)
    2 solutions readable                checkout_attempts (git history, build/, feedback/, the runtime)
    3 collect follows links             plant_in_inbound (links to source/ and to another's submission)
    4 one persistent grading account    GRADED_PROBE (startup file, daemon, /tmp, network), graded twice
    5 tampering with inbound entries    plant_in_inbound (a link named as the victim's, rename, delete)
    6 hub log and database readable     state_attempts
    7 no limits on a learner's server   LIMITS_CODE, run in the learner's own kernel
    8 course folder made by a learner   exchange_attempts
    9 learner chooses submission time   plant_in_inbound (a back-dated submission), checked after collect
   10 /tmp files survive the class      plant_tmp_files, checked after stop by the fixture
The second (review hub-probe-2.md, issue 37):
   W1 script through an image's width   XSS_OUTPUT (PNG and JPEG, width and height: the review's own
                                        cell), in the formgrader page and in Chromium, PROOF not written
   N8 a markdown javascript: link       XSS_MARKDOWN, clicked by the instructor in Chromium
   N9 a learner's page, same origin     hub_attacks_machine.plant_server_config (served? ran?), and
                                        ORIGIN_PROBE in the learner's origin, in the instructor's Chromium
   N5, N3, N2, N10 the pipeline         hub_attacks_pipeline (20 000 files, 1 100 folders, a sparse
                                        secret, sparse data; a missing secret at release; a busy server)
   N1 the hub's log, N6 a shared /tmp,  hub_attacks_machine (from the learner's kernel and shell)
   W7 no disk limit, W10 IPC left over
   N4 graded code on the real disk      graded_probe (the connection folder), graded_probe_held
"""
import asyncio
import json
import os

import subprocess
import time
import uuid
from pathlib import Path

COURSE_ID = "attention-course"

# 1, W1, N8, N9: script for the instructor's browser (in hub_attacks_browser, named here too).
from autograder.tests.hub_attacks_browser import (  # noqa: E402,F401
    ORIGIN_PROBE, ORIGIN_PROOF, PROOF, PWNED, XSS_MARKDOWN, XSS_OUTPUT, formgrader_page_has_no_script, submission_id)


def as_user(name, *cmd, cwd="/"):
    home = Path("/home") / name
    return subprocess.run(["runuser", "-u", name, "--", "env", f"HOME={home}", *cmd],
                          capture_output=True, text=True, timeout=120, cwd=cwd)


def succeeded(name, attempts: dict) -> dict:
    """The attempts (what -> command) that went through as `name`, with the start of what they printed."""
    done = {}
    for what, cmd in attempts.items():
        result = as_user(name, *cmd)
        if result.returncode == 0:
            done[what] = result.stdout[:200]
    return done


# 2 ---------------------------------------------------------------------------------------------
def checkout_attempts(hub, root: Path, stem: str) -> dict:
    git_dir = root / ".git"
    course = [str(hub.runtime / name) for name in ("utils", "autograder", "hub", "checkpoints", "bin")]
    return {
        "solutions from git history": ["git", f"--git-dir={git_dir}", "show", f"HEAD:solutions/{stem}.py"],
        "solutions/ by path": ["cat", str(root / "solutions" / f"{stem}.py")],
        "the build cache (generated notebooks)": ["ls", str(root / "build")],
        "the feedback cache": ["ls", str(root / "feedback")],
        # the course's files in the runtime (the venv holds nbgrader, whose code names these markers)
        "hidden tests in the runtime": ["grep", "-rl", "BEGIN HIDDEN TESTS", *course],
        "solution cells in the runtime": ["grep", "-rl", "BEGIN SOLUTION", *course],
        "write into the runtime": ["touch", str(hub.runtime / "utils" / "x.py")],
    }


# 3, 5, 9 -----------------------------------------------------------------------------------------
def stamp(when: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S.000000 UTC", time.gmtime(when))


def plant_in_inbound(hub, victim: str, intruder: str, stem: str) -> dict:
    """What the intruder plants in inbound before the instructor collects; the victim's submission
    name is handed to them, as the hub's log once did (6). Returns what after_collect checks."""
    inbound = hub.exchange / COURSE_ID / "inbound"
    theirs = next(p for p in inbound.iterdir() if p.name.startswith(f"{victim}+") and p.owner() == victim)
    own = next(p for p in sorted(inbound.iterdir()) if p.name.startswith(f"{intruder}+") and p.owner() == intruder)
    started = time.time()
    later = stamp(started + 3600)
    source = Path(hub.course_root) / "source" / stem / f"{stem}.ipynb"
    script = "\n".join([
        "set -u", "cd " + str(inbound),
        # 3: a submission whose notebook is a link to the instructor's source, then to the victim's submission
        f"mkdir '{intruder}+{stem}+{later}+a' && ln -s '{source}' '{intruder}+{stem}+{later}+a/{stem}.ipynb'",
        f"mkdir '{intruder}+{stem}+{later}+b' && ln -s '{theirs / (stem + '.ipynb')}' '{intruder}+{stem}+{later}+b/{stem}.ipynb'",
        # 5: a link named as the victim's newest submission, pointing at the victim's home
        f"ln -s /home/{victim} '{victim}+{stem}+{later}+c'",
        # 9: the intruder's own notebook again, in a folder and timestamp.txt dated a year earlier
        f"mkdir '{intruder}+{stem}+2000-01-01 00:00:00.000000 UTC+d'",
        f"cp '{own}'/* '{intruder}+{stem}+2000-01-01 00:00:00.000000 UTC+d/'",
        f"echo '2000-01-01 00:00:00.000000 UTC' > '{intruder}+{stem}+2000-01-01 00:00:00.000000 UTC+d/timestamp.txt'",
        f"touch -d 2000-01-01 '{intruder}+{stem}+2000-01-01 00:00:00.000000 UTC+d'/*",
        # found by the second attack: a name whose time nbgrader cannot parse made its collect fail
        # for the whole class, and so did a submission without submission_secret.txt (release_feedback)
        f"mkdir '{intruder}+{stem}+not a time' && cp '{own / (stem + '.ipynb')}' '{intruder}+{stem}+not a time/'",
    ])
    planted = as_user(intruder, "bash", "-c", script)
    assert planted.returncode == 0, f"the learner could not even plant the attempts: {planted.stderr}"
    refused = succeeded(intruder, {
        "5: rename the victim's submission away": ["mv", str(theirs), str(inbound / f"{intruder}+moved")],
        "5: delete the victim's submission": ["rm", "-rf", str(theirs)],
        "3: hard-link the victim's notebook": ["ln", str(theirs / f"{stem}.ipynb"), str(inbound / f"{intruder}+hard")],
    })
    assert not refused, f"a learner could: {refused}"
    return {"started": started, "victim_submission": theirs}


def after_collect(hub, planted: dict, victim: str, intruder: str, stem: str, solution_text: str):
    submitted = Path(hub.course_root) / "submitted"
    mine = (submitted / intruder / stem / f"{stem}.ipynb").read_text()
    assert solution_text not in mine, "3: collect copied the instructor's source as the learner's submission"
    assert (submitted / intruder / stem / f"{stem}.ipynb").stat().st_size > 0
    assert (submitted / victim / stem / f"{stem}.ipynb").exists(), "5: the victim's collected submission is gone"
    assert planted["victim_submission"].is_dir(), "5: the victim's submission was moved or deleted"
    recorded = (submitted / intruder / stem / "timestamp.txt").read_text().strip()
    assert recorded >= stamp(planted["started"] - 1)[:19], \
        f"9: the submission was recorded at {recorded}, the time the learner wrote, not the server's"


# 4 ---------------------------------------------------------------------------------------------
def graded_probe(hub) -> str:
    """Added to the intruder's notebook: run while graded, twice. It reports what an earlier grading
    left, then tries to leave things behind and to reach other accounts."""
    leak = f"/tmp/attention-leak-{hub.prefix}"
    return (
        "import builtins, os, pwd, socket, time\n"
        "home = os.path.expanduser('~')\n"
        "startup = '.ipython/profile_default/startup/00-steal.py'\n"
        "print('left by an earlier grading:', getattr(builtins, 'STOLEN', None),\n"
        f"      os.path.exists(os.path.join(home, startup)), os.path.exists('{leak}'))\n"
        "def attempt(what, action):\n"
        "    try:\n"
        "        action()\n"
        "        print('done', what)\n"
        "    except OSError as e:\n"
        "        print('refused', what, type(e).__name__)\n"
        "def write(path, text='the hidden tests', make=False):\n"
        "    if make:\n"
        "        os.makedirs(os.path.dirname(path), exist_ok=True)\n"
        "    with open(path, 'w') as f:\n"
        "        f.write(text)\n"
        "attempt('startup file in HOME', lambda: write(os.path.join(home, startup), 'import builtins; builtins.STOLEN = 1', True))\n"
        "attempt('startup file in the account home', lambda: write(os.path.join(pwd.getpwuid(os.geteuid()).pw_dir, startup), make=True))\n"
        f"attempt('leak to /tmp', lambda: write('{leak}'))\n"
        f"attempt('leak to the exchange', lambda: write('{hub.exchange / COURSE_ID / 'inbound' / 'leak'}'))\n"
        f"attempt('connect to the hub', lambda: socket.create_connection(('127.0.0.1', {hub.port}), timeout=2))\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(600)\n"
        "    os._exit(0)\n"
        "print('daemon left')\n"
        "print('cgroups', open('/proc/self/cgroup').read().replace(chr(10), ' '))\n"
        # N4: the connection folder, the one place it may write outside its tmpfs: how much it takes, and a
        # folder closed to the instructor (0700), which used to outlive the grading on the machine's disk.
        "import json\n"
        "conn = os.path.dirname([a for a in open('/proc/self/cmdline').read().split(chr(0)) if a.endswith('.json')][0])\n"
        "taken = 0\n"
        "try:\n"
        "    os.makedirs(conn + '/keep', exist_ok=True)\n"
        "    with open(conn + '/keep/fill', 'wb') as f:\n"
        "        for _ in range(64):\n"
        "            f.write(bytes(1 << 20)); f.flush(); taken += 1\n"
        "except OSError:\n"
        "    pass\n"
        "os.path.isdir(conn + '/keep') and os.chmod(conn + '/keep', 0o700)\n"
        "print('connection folder took MiB', taken)\n"
        # N1: any descriptor it holds that names a file (the hub's log was one, writable)
        "held = []\n"
        "for fd in os.listdir('/proc/self/fd'):\n"
        "    try:\n"
        "        held.append(os.readlink(f'/proc/self/fd/{fd}'))\n"
        "    except OSError:\n"
        "        pass\n"
        "print('files held', json.dumps(sorted(h for h in held if h.startswith('/') and not h.startswith((conn, '/dev/', '/proc/', '/tmp/')))))\n")


def graded_probe_held(printed: str, hub) -> list[str]:
    wrong = []
    if "left by an earlier grading: None False False" not in printed:
        wrong.append("an earlier grading left something: " + printed.split("left by an earlier grading:")[-1][:200])
    for must in ("refused startup file in the account home", "refused leak to the exchange",
                 "refused connect to the hub", "daemon left"):
        if must not in printed:
            wrong.append(f"not '{must}'")
    if Path(f"/tmp/attention-leak-{hub.prefix}").exists():
        wrong.append("the grading kernel's /tmp file is visible outside it")
    if hub.grading_cgroups and f":/{hub.cgroup}/grading " not in printed:  # 7 for grading: its limits too
        wrong.append("the grading kernel is not in the class's grading cgroup: " + printed.split("cgroups")[-1][:300])
    import re
    taken = re.search(r"connection folder took MiB (\d+)", printed)
    if not taken or int(taken[1]) > 16:
        wrong.append(f"N4: the grading kernel wrote {taken and taken[1]} MiB outside its own tmpfs (at most 16)")
    if list(hub.grading_run.iterdir()):
        wrong.append(f"N4: a grading left {[p.name for p in hub.grading_run.iterdir()]} in the connection folders' tmpfs")
    held = re.search(r"files held (\[.*\])", printed)
    if not held or json.loads(held[1]):
        wrong.append(f"N1: the grading kernel holds files of the grader's: {held and held[1]}")
    return wrong


# 6, 8 ---------------------------------------------------------------------------------------------
def state_attempts(hub) -> dict:
    return {f"read STATE/{name}": ["cat", str(hub.state / name)] for name in
            ("jupyterhub.log", "jupyterhub.sqlite", "jupyterhub_cookie_secret", "postgres.log", "hub.json",
             "accounts.json", "proxy.pid")} | {"list STATE": ["ls", str(hub.state)]}


def readable_state_files(hub) -> list[str]:
    """Files of STATE that anyone may read, outside what accounts must read (runtime, exchange, sockets)."""
    found = []
    for folder, dirs, files in os.walk(hub.state):
        rel = Path(folder).relative_to(hub.state)
        if rel.parts[:1] in (("runtime",), ("exchange",), ("pg-run",)):
            dirs.clear()
            continue
        for name in files:
            if os.lstat(os.path.join(folder, name)).st_mode & 0o004:
                found.append(str(rel / name))
    return found


def exchange_attempts(hub, stem: str) -> dict:
    course = hub.exchange / COURSE_ID
    return {
        "8: make a course folder in the exchange": ["mkdir", str(hub.exchange / "another-course")],
        "8: replace the course folder": ["mv", str(course), str(hub.exchange / "x")],
        "8: make the assignment's outbound folder first": ["mkdir", str(course / "outbound" / stem)],
        "8: remove inbound": ["rm", "-rf", str(course / "inbound")],
        "8: make a feedback page first": ["touch", str(course / "feedback" / "0123.html")],
    }


# 7 ---------------------------------------------------------------------------------------------
def limits_code(limits: dict) -> str:
    """Run in the learner's own kernel: go over each limit of their server; prints one JSON line."""
    memory, processes, file_mb = limits["memory_mb"], limits["processes"], limits["file_mb"]
    return (
        "import json, os, resource, subprocess, sys, time\n"
        "out = {}\n"
        f"share = int({memory} * 0.6) << 20  # each under the per-process limit, together over the server's\n"
        "hogs = [subprocess.Popen([sys.executable, '-c', f'b = bytearray({share}); import time; time.sleep(4)'])\n"
        "        for _ in range(2)]\n"
        "out['two allocations'] = [p.wait() for p in hogs]\n"
        "try:\n"
        f"    big = bytearray(({memory} + 512) << 20)\n"
        "    out['one allocation'] = 'allocated'\n"
        "    del big\n"
        "except MemoryError:\n"
        "    out['one allocation'] = 'MemoryError'\n"
        "started = []\n"
        "try:\n"
        f"    for _ in range({processes} + 16):\n"
        "        started.append(subprocess.Popen(['sleep', '60']))\n"
        "    out['processes'] = f'started {len(started)}'\n"
        "except OSError as e:\n"
        "    out['processes'] = f'refused after {len(started)}'\n"
        "for p in started:\n"
        "    p.kill(); p.wait()\n"
        "try:\n"
        "    with open('attention-big.bin', 'wb') as f:\n"
        f"        f.seek({file_mb} << 20)\n"
        "        f.write(b'x')\n"
        "    out['file'] = 'written'\n"
        "except OSError as e:\n"
        "    out['file'] = f'refused {e.errno}'\n"
        "if os.path.exists('attention-big.bin'):\n"
        "    os.remove('attention-big.bin')\n"
        "spin = 'import time\\nend = time.time() + 1.5\\nwhile time.time() < end: pass'\n"
        "before = os.times()\n"
        "t0 = time.time()\n"
        "for p in [subprocess.Popen([sys.executable, '-c', spin]) for _ in range(2)]:\n"
        "    p.wait()\n"
        "after = os.times()\n"
        "out['cpus used'] = round((after.children_user + after.children_system - before.children_user\n"
        "                          - before.children_system) / (time.time() - t0), 2)\n"
        "print(json.dumps(out))\n")


def limits_held(out: dict, limits: dict, cgroups: bool) -> list[str]:
    wrong = []
    if out["one allocation"] != "MemoryError":
        wrong.append(f"allocated {limits['memory_mb'] + 512} MiB in one process")
    if cgroups and -9 not in out["two allocations"]:
        wrong.append(f"two processes of 60% of the memory limit each both ran: {out['two allocations']}")
    if not out["processes"].startswith("refused"):
        wrong.append(f"processes: {out['processes']}")
    if not out["file"].startswith("refused"):
        wrong.append("wrote a file past the file-size limit")
    if cgroups and out["cpus used"] > limits["cpus"] + 0.25:
        wrong.append(f"used {out['cpus used']} CPUs with a limit of {limits['cpus']}")
    return wrong


def run_in_kernel(hub, user: str, code: str, timeout: float = 180) -> str:
    """Execute `code` in a new kernel of `user`'s own server (its REST API and websocket, through the
    hub's proxy, as the learner's browser does); what it printed, and its error if any."""
    return asyncio.run(_run_in_kernel(hub, user, code, timeout))


async def _run_in_kernel(hub, user, code, timeout):
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect
    kernel = hub.api("POST", f"/user/{user}/api/kernels", {"name": "python3"})
    try:
        request = hub.request(f"/user/{user}/api/kernels/{kernel['id']}/channels")
        ws = await websocket_connect(HTTPRequest(request.full_url.replace("http", "ws", 1), headers={
            "Host": request.get_header("Host"), "Authorization": f"token {hub.service_token}"}))
        msg_id = uuid.uuid4().hex
        ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": user, "session": uuid.uuid4().hex,
                       "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        printed = []
        while True:
            message = await asyncio.wait_for(ws.read_message(), timeout)
            if message is None:
                break
            message = json.loads(message)
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "stream":
                printed.append(content["text"])
            elif kind == "error":
                printed.append(f"{content['ename']}: {content['evalue']}")
            elif kind == "status" and content["execution_state"] == "idle":
                break
        ws.close()
        return "".join(printed)
    finally:
        hub.api("DELETE", f"/user/{user}/api/kernels/{kernel['id']}")


# 10 ---------------------------------------------------------------------------------------------
def plant_tmp_files(hub, learner: str) -> list[Path]:
    paths = [Path(top) / f"attention-left-{hub.prefix}" for top in ("/tmp", "/var/tmp", "/dev/shm")]
    for path in paths:
        assert as_user(learner, "sh", "-c", f"echo mine > {path}").returncode == 0
    return paths


def gone(paths) -> list[str]:
    return [str(p) for p in paths if os.path.lexists(p)]



