"""JupyterHub for one class of this course (started by hub/course_hub.py, `make hub`): local Unix
accounts with a test authenticator, one single-user JupyterLab per account spawned as that account,
the instructor's and the learners' tools set by role, everything on loopback.

The settings of this class (ports, accounts, exchange, gradebook) come from hub.json in the state
folder that course_hub.py prepares; ATTENTION_HUB_STATE names it."""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from hub.course_auth import CourseAuthenticator  # noqa: E402
from hub.limits import LimitedSpawner  # noqa: E402

c = get_config()  # noqa: F821
state = Path(os.environ["ATTENTION_HUB_STATE"])
cls = json.loads((state / "hub.json").read_text())
# What the servers and kernels run: the course's runtime, not the checkout, which is closed to them
# while the class runs (hub/runtime.py).
runtime = Path(cls["runtime"])

c.JupyterHub.bind_url = f"http://127.0.0.1:{cls['port']}"
# Each server on an origin of its own, http://<name>.localhost:PORT (browsers resolve *.localhost to
# the loopback): a page in one server's origin cannot read another's cookies, pages or API, the
# instructor's formgrader included; the hub keeps http://localhost:PORT. A cluster uses a wildcard
# DNS name and certificate instead (hub/KUBERNETES.md).
c.JupyterHub.subdomain_host = f"http://{cls['domain']}:{cls['port']}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{cls['hub_port']}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{cls['proxy_api_port']}"
c.ConfigurableHTTPProxy.command = [cls["chp"]]
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(state / "jupyterhub.pid")
c.ConfigurableHTTPProxy.pid_file = str(state / "proxy.pid")

# Where a real authenticator plugs in: replace these two lines by OAuthenticator (GitHub, Google,
# a university's OIDC) or ltiauthenticator (an LMS); the names it returns must be Unix accounts
# (LocalAuthenticator's create_system_users can add them), as the spawner runs each server as one.
c.JupyterHub.authenticator_class = CourseAuthenticator
c.CourseAuthenticator.accounts_file = str(state / "accounts.json")
c.Authenticator.allowed_users = set([cls["instructor"], *cls["learners"]])
c.Authenticator.admin_users = {cls["instructor"]}

# A service token for course_hub.py and the tests: start servers and call them through the proxy.
c.JupyterHub.services = [{"name": "course-admin", "api_token": cls["service_token"]}]
c.JupyterHub.load_roles = [{"name": "course-admin", "services": ["course-admin"],
                            "scopes": ["admin:users", "admin:servers", "access:servers", "list:users"]}]

# Each server in a cgroup of its own, with memory, CPU, process and file-size limits (hub/limits.py).
c.JupyterHub.spawner_class = LimitedSpawner
c.LimitedSpawner.limits = cls["limits"]
c.LimitedSpawner.cgroup_parent = cls["cgroup"]
c.LimitedSpawner.unlimited = {cls["instructor"]}  # its grading runs in the grading cgroup (hub/pipeline.py)
# Every server: a private tmpfs on each world-writable folder, its own IPC and log (hub/private.py).
c.LimitedSpawner.private_folders = cls["private_folders"]
c.LimitedSpawner.private_mb = cls["limits"]["private_mb"]
c.LimitedSpawner.log_folder = str(state / "logs")
# -s: no packages from the account's ~/.local; -P: not the home folder (the server's working folder)
# first on the module path: nothing the account writes changes the server's code.
c.Spawner.cmd = [str(runtime / ".venv" / "bin" / "python"), "-s", "-P", "-m", "jupyterhub.singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180
c.JupyterHub.shutdown_on_logout = False


def role_environment(spawner):
    """The instructor's server gets the instructor's config folder (formgrader, Create Assignment,
    the course folder and the gradebook); a learner's server gets the learner's (Validate, the
    assignment list and feedback; instructor tools disabled)."""
    name = spawner.user.name
    role = "instructor" if name == cls["instructor"] else "learner"
    home = Path("~" + name).expanduser()
    env = {
        "PATH": f"{runtime / 'bin'}:{runtime / '.venv' / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "JUPYTER_CONFIG_PATH": str(runtime / "hub" / "roles" / role),
        # The server's settings are the role's, not the account's: its user folder is the role's
        # (root's) too, so ~/.jupyter (extra_static_paths, extensions, headers) is never read.
        "JUPYTER_CONFIG_DIR": str(runtime / "hub" / "roles" / role),
        "JUPYTERLAB_SETTINGS_DIR": str(home / ".jupyter" / "lab" / "user-settings"),  # the lab's look: theirs
        "JUPYTERLAB_WORKSPACES_DIR": str(home / ".jupyter" / "lab" / "workspaces"),
        "TMPDIR": "/tmp",  # the server's own (hub/private.py)
        "ATTENTION_REPO": str(runtime),
        "ATTENTION_EXCHANGE": cls["exchange"],
        "PYTHONPATH": str(runtime),
    }
    if role == "instructor":
        env["ATTENTION_COURSE_ROOT"] = cls["course_root"]
        env["ATTENTION_GRADEBOOK"] = cls["gradebook"]
        env["ATTENTION_GRADER"] = cls["grader"]  # grading kernels run as this account (autograder/sandbox.py)
        env["ATTENTION_GRADING_CGROUPS"] = ":".join(cls["grading_cgroups"])  # and in this cgroup (hub/limits.py)
        env["ATTENTION_GRADING_RUN"] = cls["grading_run"]  # their connection folders, on a small tmpfs
    spawner.environment.update(env)


c.Spawner.pre_spawn_hook = role_environment
