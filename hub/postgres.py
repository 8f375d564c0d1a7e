"""The class's gradebook server: PostgreSQL of its own, in STATE/pg (data, postgres's) and STATE/pg-run
(its socket), reached with peer authentication only, by the instructor's account (hub/course_hub.py)."""
import glob
import shutil
import subprocess
import time
from pathlib import Path

from hub.accounts import private_log, run


def pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


def _as_postgres(*cmd, **kw):
    return run("runuser", "-u", "postgres", "--", *cmd, **kw)


def start(state: Path, port: int, owner: str, database: str):
    """A server on `port`, the database `database` owned by the role `owner`; (process, gradebook URL)."""
    bindir, data, sockets = pg_bin(), state / "pg", state / "pg-run"
    for folder in (data, sockets):
        folder.mkdir()
        shutil.chown(folder, "postgres", "postgres")
    data.chmod(0o700)
    _as_postgres(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth-local=peer", "--auth-host=reject",
                 timeout=180)
    proc = subprocess.Popen(["runuser", "-u", "postgres", "--", str(bindir / "postgres"), "-D", str(data),
                             "-k", str(sockets), "-p", str(port), "-c", "listen_addresses="],
                            stdout=subprocess.DEVNULL, stderr=private_log(state / "postgres.log"),
                            start_new_session=True, umask=0o077)
    psql = [str(bindir / "psql"), "-h", str(sockets), "-p", str(port), "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c"]
    deadline = time.monotonic() + 60
    while _as_postgres(*psql, "SELECT 1", check=False).returncode != 0:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("PostgreSQL did not start: " + (state / "postgres.log").read_text()[-1000:])
        time.sleep(0.5)
    _as_postgres(*psql, f'CREATE ROLE "{owner}" LOGIN')
    _as_postgres(*psql, f'CREATE DATABASE {database} OWNER "{owner}"')
    return proc, f"postgresql+psycopg://{owner}@/{database}?host={sockets}&port={port}"
