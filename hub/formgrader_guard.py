"""The instructor's formgrader, with every piece of work on a learner's submission moved out of the
server (a Jupyter server extension of the instructor's role: hub/roles/instructor/jupyter_server_config.json).

nbgrader's handlers call its API in the request: the server's event loop waits for collect,
autograde, feedback, and the rendering of a submission's page, however long a submission makes
them take, and all of it runs in the instructor's server, which has no limits. Here those handlers
(the same URLs, the same answers) hand the work to a child process (hub/pipeline.py) and wait for
it in a thread, without blocking: confined to the class's grading cgroup, ended after a time limit,
one learner per process. "Generate feedback" and "release feedback" for the whole assignment run
learner by learner: one learner's failure is reported with the others' successes, and never stops them.

The page of a submission is rendered by that process too (hub/render_safe.py), and sent with a
Content-Security-Policy: only the template's scripts, which carry this page's nonce, may run.
"""
import asyncio
import contextlib
import glob
import inspect
import json
import multiprocessing
import multiprocessing.forkserver
import os
import signal

from tornado import web

from hub import pipeline
from hub.render_safe import policy

# Seconds a step may take: autograde is bounded by the course's notebook_timeout (120 s) plus kernel start.
TIMEOUTS = {"collect": 300, "autograde": 900, "feedback": 300, "release": 120, "render": 120}


_context = None


def _forkserver():
    """multiprocessing's forkserver, started once, with hub.pipeline (nbgrader, nbconvert) imported."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(["hub.pipeline", "hub.pipeline_warm"])
    return _context


def _wait(proc, answers, step: str, args) -> dict:
    """In a thread of the server: the child's answer, or a failure that says why (its time is up, it died)."""
    what = f"{step} {' '.join(str(a) for a in args[:2])}"
    try:
        if answers.poll(TIMEOUTS[step]):
            return answers.recv()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the child's session: sudo and the grading kernel too
        proc.kill()
        return {"success": False, "error": f"{what}: stopped after {TIMEOUTS[step]} s"}
    except EOFError:
        proc.join(5)
        return {"success": False, "error": f"{what}: its process ended ({proc.exitcode}) without an answer"}
    finally:
        answers.close()
        proc.join(5)


async def run_step(step: str, *args) -> dict:
    """hub.pipeline's `step` in a child of the forkserver; the server's event loop goes on meanwhile."""
    context = _forkserver()
    answers, answer = context.Pipe(duplex=False)
    proc = context.Process(target=pipeline.child, args=(answer, step, args))
    try:
        proc.start()
    except Exception as e:  # the forkserver could not start the child
        answers.close()
        return {"success": False, "error": f"{step}: no process for it ({type(e).__name__}: {e})"}
    finally:
        answer.close()
    return await asyncio.get_running_loop().run_in_executor(None, _wait, proc, answers, step, args)


async def per_learner(step: str, assignment: str, learners: list[str]) -> dict:
    """`step` for each learner in turn; success only if every one succeeded, each failure named."""
    logs, failed = [], []
    for learner in learners:
        result = await run_step(step, assignment, learner)
        logs.append(f"== {learner}: {'done' if result.get('success') else 'FAILED'}\n{result.get('log', '')}")
        if not result.get("success"):
            failed.append(f"{learner}: {result.get('error', '')[-1500:]}")
    answer = {"success": not failed, "log": "\n".join(logs)}
    if failed:
        answer["error"] = (f"{step} failed for {len(failed)} of {len(learners)} learners (the others are done):\n"
                           + "\n".join(failed))
    return answer


def _learners(handler, folder: str, assignment: str) -> list[str]:
    pattern = handler.coursedir.format_path(folder, "*", assignment)
    return sorted(os.path.basename(os.path.dirname(p)) for p in glob.glob(pattern) if os.path.isdir(p))


def _patch():
    from nbgrader.server_extensions.formgrader import apihandlers as api, handlers
    from nbgrader.server_extensions.formgrader.base import check_notebook_dir, check_xsrf

    def action(work):
        @web.authenticated
        @check_xsrf
        @check_notebook_dir
        async def post(self, *args):
            self.write(json.dumps(await work(self, *args)))
        return post

    api.CollectHandler.post = action(lambda h, a: run_step("collect", a))
    api.AutogradeHandler.post = action(lambda h, a, s: run_step("autograde", a, s))
    api.GenerateFeedbackHandler.post = action(lambda h, a, s: per_learner("feedback", a, [s]))
    api.ReleaseFeedbackHandler.post = action(lambda h, a, s: per_learner("release", a, [s]))
    api.GenerateAllFeedbackHandler.post = action(
        lambda h, a: per_learner("feedback", a, _learners(h, h.coursedir.autograded_directory, a)))
    api.ReleaseAllFeedbackHandler.post = action(
        lambda h, a: per_learner("release", a, _learners(h, h.coursedir.feedback_directory, a)))

    original = handlers.SubmissionHandler.get

    @web.authenticated
    @check_xsrf
    @check_notebook_dir
    async def submission(self, submission_id):
        # nbgrader's own handler up to the rendering (it finds the notebook and builds the resources):
        # its exporter is swapped for one that hands the work to hub.pipeline and keeps the nonce.
        rendered = {}

        class Deferred:
            def from_filename(self, filename, resources):
                rendered.update(filename=filename, resources=resources)
                return "", resources

        self._attention_exporter = Deferred()
        inspect.unwrap(original)(self, submission_id)
        if not rendered or self.get_status() != 200:
            return
        result = await run_step("render", rendered["filename"], rendered["resources"])
        if not result.get("success"):
            raise web.HTTPError(500, result.get("error", "")[-2000:])
        self.clear()
        self.set_header("Content-Type", "text/html; charset=UTF-8")
        self.set_header("Content-Security-Policy", policy(result.get("nonce")))
        self.write(result["html"])

    handlers.SubmissionHandler.get = submission
    handlers.SubmissionHandler.exporter = property(lambda self: getattr(self, "_attention_exporter", None)
                                                   or self.settings["nbgrader_exporter"])


def _jupyter_server_extension_points():
    return [{"module": "hub.formgrader_guard"}]


def _load_jupyter_server_extension(serverapp):
    _patch()
    # Started now, in the server's environment, so that the first page does not wait for nbgrader's import.
    _forkserver()
    multiprocessing.forkserver.ensure_running()
    serverapp.log.info("formgrader: submissions rendered and graded by hub.pipeline, under a Content-Security-Policy")
