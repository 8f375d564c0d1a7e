"""The class's hub as its administrator and the tests reach it (hub/course_hub.py's CourseHub): the
hub's REST API with the course-admin service's token, and each server through its own origin."""
import json
import time
import urllib.error
import urllib.request


class HubAPI:
    """Needs `state`, `domain`, `port` and `service_token` (CourseHub sets them)."""

    def log(self) -> str:
        path = self.state / "jupyterhub.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # The hub's REST API ---------------------------------------------------------------------
    def host_of(self, name: str) -> str:
        """The origin of `name`'s server (JupyterHub's subdomain scheme)."""
        from jupyterhub.utils import subdomain_hook_idna
        return f"{subdomain_hook_idna(name, self.domain, 'user')}:{self.port}"

    def request(self, path: str, data=None, method=None, headers=None) -> urllib.request.Request:
        """A request through the hub's proxy: /user/<name>/... to that server's origin (sent to the
        loopback with its Host header: Python does not resolve *.localhost as browsers do)."""
        host = f"{self.domain}:{self.port}"
        if path.startswith("/user/"):
            host = self.host_of(path.split("/")[2])
        return urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                      headers={"Host": host, **(headers or {})})

    def api(self, method: str, path: str, body=None, timeout=300):
        """A request through the hub's proxy with the course-admin service's token; the JSON answer."""
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        request = self.request(path, data=data, method=method, headers={
            "Authorization": f"token {self.service_token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            text = answer.read().decode()
        return json.loads(text) if text.strip() else None

    def spawn(self, names, timeout=240):
        """Start the named users' servers and wait until each is ready."""
        for name in names:
            try:
                self.api("POST", f"/hub/api/users/{name}/server")
            except urllib.error.HTTPError as e:
                if e.code != 400:  # 400: already running
                    raise RuntimeError(f"starting {name}'s server: {e.code} {e.read().decode()[:500]}") from e
        deadline = time.monotonic() + timeout
        waiting = list(names)
        while waiting:
            waiting = [n for n in waiting if not self.api("GET", f"/hub/api/users/{n}")["servers"].get("", {}).get("ready")]
            if waiting and time.monotonic() > deadline:
                raise RuntimeError(f"servers not ready after {timeout} s: {waiting}\n" + self.log()[-3000:])
            time.sleep(1)
