"""The Execute step of autograding, bounded and guarded (nbgrader_config.py puts it in place of
nbgrader's own Execute in `Autograde.autograde_preprocessors`).

- A time limit for the whole notebook (`GradingExecute.notebook_timeout`) on top of the per-cell
  `Execute.timeout`: a cell never waits longer than what is left of it, and once it is used up the
  remaining cells are not run and score 0, with a reason that names the first cell that ran out
  of time.
- A kernel that dies (`os._exit`, a native crash, out of memory) or ignores the interrupt ends the
  run, not the grading: that cell and the rest score 0, with a reason that names the cell.
- Before every test cell, `autograder/kernel_guard.py` with `kernel_guard_modules.py` (sent as
  text, never imported by the kernel) puts back the builtins, torch and IPython machinery recorded before the first cell and loads the
  course's checks and reference kernels afresh, so a notebook that patches them gains nothing.
- `GradingExecute.run_as`: the kernel runs as another Unix account, through sudo
  (autograder/sandbox.py), so that the learner's code cannot read what the grader can.
"""
import binascii
import marshal
import math
import re
import sys
from pathlib import Path
from time import monotonic

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Bool, Integer, Unicode

from autograder.prestart import DEFAULT_MEMORY_MB, KERNEL_ARGUMENTS, PRESTARTED, kernel_env, limit_memory, memory_limit_mb

ROOT = Path(__file__).resolve().parent.parent
# The guard: two files run as one text in one namespace (kernel_guard.py, then its half for the
# course's own modules).
GUARD = "\n".join((Path(__file__).resolve().parent / name).read_text(encoding="utf-8")
                  for name in ("kernel_guard.py", "kernel_guard_modules.py"))
# Sent compiled (marshal) when the kernel runs this same Python, which saves compiling it before
# every test cell; as text otherwise.
_GUARD_CODE = binascii.b2a_base64(marshal.dumps(compile(GUARD, "<autograder kernel_guard>", "exec")), newline=False)
_CHECK_IMPORT = re.compile(r"(?:from\s+autograder\.checks\s+import\s+([\w\s,()]+)|import\s+(autograder\.checks\.\w+))")


def error(ename: str, en: str, zh: str) -> NotebookNode:
    """An error output: nbgrader scores a test cell that has one 0, and shows it in the feedback."""
    return NotebookNode(output_type="error", ename=ename, evalue=f"{en} {zh}", traceback=[f"{ename}: {en}", zh])


def describe(cell, index: int) -> tuple[str, str]:
    """How feedback names a cell, in English and in Chinese."""
    gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    if gid and cell.metadata["nbgrader"].get("grade"):
        return f"the test cell `{gid}`", f"测试单元格 `{gid}`"
    if gid:
        return f"your cell `{gid}`", f"你的单元格 `{gid}`"
    first = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")[:60]
    return f"cell {index + 1} (`{first}`)", f"第 {index + 1} 个单元格（`{first}`）"


def wanted_checks(source: str) -> list[str]:
    """Modules of autograder.checks that a test cell imports, e.g. ["autograder.checks.nb01"]."""
    names = []
    for names_list, dotted in _CHECK_IMPORT.findall(source):
        if dotted:
            names.append(dotted)
        for name in re.findall(r"\w+", names_list):
            if name != "as":
                names.append(f"autograder.checks.{name}")
    return names


class GuardFailed(Exception):
    pass


class GradingExecute(Execute):
    """nbgrader's Execute with a time limit for the whole notebook, a verdict when the kernel
    dies, and the kernel guard before every test cell."""

    notebook_timeout = Integer(
        120, help="Seconds for the whole notebook, kernel start included; cells after it are not run."
    ).tag(config=True)
    guard = Bool(True, help="Restore and reload what the checks rely on before every test cell.").tag(config=True)
    iopub_timeout = Integer(
        10, help="Seconds to wait for a cell's last output after its reply, or for an interrupted cell to "
                 "stop (nbclient's 4 s is short for an import interrupted on a busy machine)."
    ).tag(config=True)
    memory_limit_mb = Integer(
        DEFAULT_MEMORY_MB, help="MiB of data memory for the grading kernel (0: no limit); a cell that goes over "
                                "it fails with a verdict that names the limit. AUTOGRADER_MEMORY_LIMIT_MB overrides it."
    ).tag(config=True)

    run_as = Unicode(
        "", help="Unix account that runs the grading kernel, through sudo (autograder/sandbox.py; the "
                 "course's JupyterHub sets it); empty: the grading process's own account."
    ).tag(config=True)

    def create_kernel_manager(self):
        if self.run_as:
            from autograder.sandbox import kernel_manager_class
            self.kernel_manager_class = kernel_manager_class()
        km = super().create_kernel_manager()
        if self.run_as:
            km.run_as, km.memory_limit_mb = self.run_as, memory_limit_mb(self.memory_limit_mb)
        return km

    def preprocess(self, nb, resources=None, km=None):
        self._deadline = monotonic() + self.notebook_timeout
        self._stopped = None  # (en, zh): why the remaining cells were not run
        self._first_timeout = None  # (en, zh) label of the first cell that ran out of time
        self._timed_out = None
        self._guard_started = False
        self._guard_error = None
        self._in_guard = False
        # The outputs are in by then and the kernel has nothing to save: killing it takes about
        # 0.1 s where a graceful shutdown took 0.8-2.6 s of a submit (measured on 2 cores).
        self.shutdown_kernel = "immediate"
        prestarted = km is None and not self.run_as and PRESTARTED and PRESTARTED.pop()
        if not prestarted:
            return super().preprocess(nb, resources, km)
        try:
            return super().preprocess(nb, resources, prestarted)
        finally:  # nbclient leaves a kernel it did not start running
            self.km = prestarted
            self._cleanup_kernel()

    async def async_start_new_kernel(self, **kwargs):
        kwargs.setdefault("env", kernel_env())
        kwargs.setdefault("preexec_fn", limit_memory(memory_limit_mb(self.memory_limit_mb)))
        self.extra_arguments = [*KERNEL_ARGUMENTS, *self.extra_arguments]
        return await super().async_start_new_kernel(**kwargs)

    # Time ------------------------------------------------------------------------------------
    def _left(self) -> float:
        return self._deadline - monotonic()

    def _get_timeout(self, cell):
        left = max(1, math.ceil(self._left()))
        if getattr(self, "_in_guard", False):  # the guard (import torch, reloads) is bounded by the notebook's limit only
            return left
        per_cell = super()._get_timeout(cell)
        return left if per_cell is None else min(per_cell, left)

    async def _async_handle_timeout(self, timeout, cell=None):
        self._timed_out = timeout
        return await super()._async_handle_timeout(timeout, cell)

    def _name_memory_errors(self, cell):
        """An allocation refused by the kernel's memory limit becomes a verdict that names the limit."""
        limit = memory_limit_mb(self.memory_limit_mb)
        for output in cell.get("outputs", []):
            if output.get("output_type") != "error" or limit <= 0:
                continue
            ename, evalue = output.get("ename", ""), output.get("evalue", "")
            if ename in ("MemoryError", "_ArrayMemoryError") or "Cannot allocate memory" in evalue or "can't allocate memory" in evalue:
                en = (f"Out of memory: grading gives your notebook at most {limit} MiB, and this cell asked for more "
                      f"({ename}). Look for a tensor much larger than the exercise needs.")
                zh = f"内存不足：评分时笔记本最多可用 {limit} MiB 内存，该单元格申请了更多（{ename}）。请检查是否创建了远大于练习所需的张量。"
                output.update(ename="MemoryLimit", evalue=f"{en} {zh}", traceback=[f"MemoryLimit: {en}", zh])

    def _budget_stop(self, current=("", "")):
        en, zh = self._first_timeout or current
        self._stop(
            f"Not run: grading stopped when the notebook used up its time limit of {self.notebook_timeout} s "
            f"(each cell may take at most {self.timeout} s). The first cell that ran out of time was {en}: "
            "look there for an infinite loop or a very slow step.",
            f"未运行：笔记本用完了 {self.notebook_timeout} 秒的总时间限制（每个单元格最多 {self.timeout} 秒），"
            f"评分已停止。最先超时的是{zh}：请在那里检查死循环或非常慢的步骤。")

    def _stop(self, en, zh):
        if self._stopped is None:
            self._stopped = (en, zh)

    # The guard -------------------------------------------------------------------------------
    def _call_guard(self, function: str, *args):
        expression = (
            "(lambda ns, sys=__import__('sys'): (exec("
            f"__import__('marshal').loads(__import__('binascii').a2b_base64({_GUARD_CODE!r})) "
            f"if sys.implementation.cache_tag == {sys.implementation.cache_tag!r} "
            f"else compile({GUARD!r}, '<autograder kernel_guard>', 'exec'), ns), "
            f"ns[{function!r}](*{args!r}))[1])({{'__name__': '__autograder_guard__'}})")
        msg_id = self.kc.execute("", silent=True, store_history=False, user_expressions={"guard": expression})
        self._timed_out = None
        self._in_guard = True
        try:
            reply = self.wait_for_reply(msg_id)
        finally:
            self._in_guard = False
        if reply is None or self._timed_out:
            raise TimeoutError
        result = reply["content"].get("user_expressions", {}).get("guard", {})
        if reply["content"].get("status") != "ok" or result.get("status") != "ok":
            raise GuardFailed(f"{result.get('ename', '')}: {result.get('evalue', '')}")
        return result["data"]["text/plain"]

    def _guard_before(self, cell):
        if not self.guard:
            return
        if not self._guard_started:
            self._guard_started = True
            try:
                self._call_guard("start", str(ROOT))
            except GuardFailed as e:
                self._guard_error = str(e)
        if cell.metadata.get("nbgrader", {}).get("grade"):
            if self._guard_error:
                raise GuardFailed(self._guard_error)
            self._call_guard("refresh", str(ROOT), wanted_checks(cell.source))

    # Cells -----------------------------------------------------------------------------------
    def preprocess_cell(self, cell, resources, index):
        self._check_assign_resources(resources)
        if cell.cell_type != "code" or not cell.source.strip():
            return cell, self.resources
        en, zh = describe(cell, index)
        if self._stopped is None and self._left() <= 0:
            self._budget_stop((en, zh))
        if self._stopped is not None:
            cell.outputs = [error("NotRun", *self._stopped)]
            return cell, self.resources
        try:
            try:
                self._guard_before(cell)
            except GuardFailed as e:
                cell.outputs = [error(
                    "GradingGuard",
                    "This test was not run: grading could not restore the course's checks before it, because "
                    f"the notebook changed the Python machinery they rely on ({e}).",
                    f"该测试未运行：评分前无法恢复课程的检查代码，因为笔记本修改了它们所依赖的 Python 机制（{e}）。")]
                return cell, self.resources
            self._timed_out = None
            self.execute_cell(cell, index, store_history=True)
        except DeadKernelError:
            cell.outputs.append(error(
                "DeadKernelError",
                f"The Python kernel died while running {en}: something in it, or in the code it calls, ends the "
                "process (os._exit, a crash in native code, running out of memory).",
                f"Python 内核在运行{zh}时退出了：其中或它调用的代码结束了进程（os._exit、原生代码崩溃、内存耗尽）。"))
            self._stop(
                f"Not run: the Python kernel died while running {en}, so the cells after it could not be tested.",
                f"未运行：Python 内核在运行{zh}时退出了，因此之后的单元格无法测试。")
            return cell, self.resources
        except (CellTimeoutError, TimeoutError):
            # The cell (or the guard before it) ran out of time and the kernel did not stop when interrupted.
            self._first_timeout = self._first_timeout or (en, zh)
            if self._left() <= 1:
                self._budget_stop()
                cell.outputs.append(error("NotRun", *self._stopped))
                return cell, self.resources
            cell.outputs.append(error(
                "CellTimeoutError",
                f"This cell did not finish within {self._timed_out or self.timeout} s and did not stop when interrupted.",
                f"该单元格未能在 {self._timed_out or self.timeout} 秒内完成，且中断后仍未停止。"))
            self._stop(
                f"Not run: {en} did not finish in time and did not stop when interrupted, so grading stopped there.",
                f"未运行：{zh}未能按时完成，且中断后仍未停止，评分在此停止。")
            return cell, self.resources
        self._name_memory_errors(cell)
        if self._timed_out:
            self._first_timeout = self._first_timeout or (en, zh)
            limit = self._timed_out
            for output in cell.outputs:
                if output.get("output_type") == "error" and output.get("ename") == "CellTimeoutError":
                    output.evalue = (f"This cell did not finish within {limit} s: look for an infinite loop or a very "
                                     f"slow step. 该单元格未能在 {limit} 秒内完成：请检查是否有死循环或非常慢的步骤。")
            if self._left() <= 1:
                self._budget_stop()
        return cell, self.resources
