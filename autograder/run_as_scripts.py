"""Run the course's notebooks as plain Python, where Jupyter is not installed (a GPU machine).

    python -m autograder.run_as_scripts 07 08 09 10 11 12 13 14 15    # from the repository's root
    python -m autograder.run_as_scripts 07 --timeout 120 --all

Each `solutions/NN_*.py` (jupytext's percent format is valid Python) runs in a fresh process, cell
after cell in one namespace, as Jupyter would run it: from `solutions/`, the repository on the
import path, matplotlib without a display, every cell as is, hidden tests included. Printed per
notebook: ok or failed (with the cell and the end of its traceback) or timed out, the seconds it
took, and what its measurement cells (those marked NBVAL_IGNORE_OUTPUT: timings, memory, bandwidth)
printed; `--all` prints every cell's output. The exit status is the number of notebooks not ok.
"""
import argparse
import contextlib
import io
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
MEASURED = "NBVAL_IGNORE_OUTPUT"


def code_cells(path: Path) -> list[tuple[int, str]]:
    """(first line number, source) of each code cell of a jupytext percent file."""
    cells, start, lines, is_code = [], None, [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(keepends=True), 1):
        if line.startswith("# %%"):
            if is_code:
                cells.append((start, "".join(lines)))
            start, lines, is_code = number + 1, [], not line.startswith("# %% [markdown]")
        elif start is not None:
            lines.append(line)
    if is_code:
        cells.append((start, "".join(lines)))
    return cells


def run_cells(path: Path, print_all: bool) -> int:
    """In this process: run every code cell; print the outputs asked for; 1 at the first failure."""
    namespace = {"__name__": "__main__"}
    for start, source in code_cells(path):
        if source.lstrip().startswith(("%", "!")):
            print(f"  line {start}: IPython magic or shell command, skipped", flush=True)
            continue
        code = compile("\n" * (start - 1) + source, str(path), "exec")
        out, began = io.StringIO(), time.perf_counter()
        try:
            with contextlib.redirect_stdout(out):
                exec(code, namespace)
        except BaseException:
            print(f"  FAILED in the cell at line {start}:\n" + indent(out.getvalue()) + indent(traceback.format_exc()), flush=True)
            return 1
        finally:
            if "matplotlib.pyplot" in sys.modules:
                sys.modules["matplotlib.pyplot"].close("all")
        if print_all or MEASURED in source:
            print(f"  line {start} ({time.perf_counter() - began:.1f} s):\n" + indent(out.getvalue()), end="", flush=True)
    return 0


def indent(text: str) -> str:
    return "".join(f"    {line}\n" for line in text.splitlines())


def find(number: str) -> Path:
    matches = sorted(SOLUTIONS.glob(f"{int(number):02d}_*.py"))
    if not matches:
        raise SystemExit(f"no notebook numbered {number} in {SOLUTIONS}")
    return matches[0]


def run_notebook(path: Path, timeout: float, print_all: bool) -> bool:
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.getenv("PYTHONPATH")])))
    env.pop("NBGRADER_EXECUTION", None)  # run as a learner would: demonstrations on the GPU when present
    command = [sys.executable, "-m", "autograder.run_as_scripts", "--child", str(path)] + (["--all"] if print_all else [])
    began = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=SOLUTIONS, env=env, capture_output=True, text=True, timeout=timeout)
        status, stdout, stderr = ("ok" if done.returncode == 0 else "failed"), done.stdout, done.stderr
    except subprocess.TimeoutExpired as e:
        status = f"timed out after {timeout:.0f} s"
        stdout, stderr = (s.decode(errors="replace") if isinstance(s, bytes) else (s or "") for s in (e.stdout, e.stderr))
    print(f"== {path.stem}: {status}, {time.perf_counter() - began:.1f} s", flush=True)
    print(stdout, end="", flush=True)
    if status != "ok":  # tqdm bars and warnings go to stderr: shown only when something went wrong
        print(indent("\n".join(stderr.splitlines()[-15:])), end="", flush=True)
    return status == "ok"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("numbers", nargs="*", help="notebook numbers, e.g. 07 13 (default: 07 to 16)")
    parser.add_argument("--timeout", type=float, default=90, help="seconds per notebook (default 90)")
    parser.add_argument("--all", action="store_true", help="print every cell's output, not only the measurements'")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return run_cells(args.child, args.all)
    import torch  # only to say where the demonstrations ran

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU: demonstrations on the CPU"
    print(f"torch {torch.__version__}, {gpu}, python {sys.version.split()[0]}", flush=True)
    began = time.perf_counter()
    results = {find(n).stem: None for n in (args.numbers or [f"{n:02d}" for n in range(7, 17)])}
    for stem in results:
        results[stem] = run_notebook(SOLUTIONS / f"{stem}.py", args.timeout, args.all)
    failed = [stem for stem, ok in results.items() if not ok]
    print(f"== {len(results) - len(failed)} of {len(results)} ok in {time.perf_counter() - began:.0f} s"
          + (f"; not ok: {', '.join(failed)}" if failed else ""))
    return len(failed)


if __name__ == "__main__":
    sys.exit(main())
