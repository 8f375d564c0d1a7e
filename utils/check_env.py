"""OK/FAIL for every requirement of the course environment.

    make check-env        (or: .venv/bin/python -m utils.check_env)
"""
import importlib.metadata as md
import json
import shutil
import sys
from pathlib import Path

PINS = {"nbgrader": "0.9.6", "nbval": "0.11.0", "tiktoken": "0.14.0"}
# requirements.txt pins torch 2.13.0, the release the stored outputs come from; 2.11 (Colab's) and
# 2.12 grade the same (README, "Where it runs"); below 2.4 notebook 12's checks lack nn.RMSNorm.
TORCH_TESTED = (2, 11)


def _version(package):
    try:
        return md.version(package)
    except md.PackageNotFoundError:
        return None


def checks():
    yield "python >= 3.10", sys.version_info >= (3, 10), sys.version.split()[0]
    torch = _version("torch")
    major_minor = tuple(int(p) for p in torch.split(".")[:2]) if torch else (0, 0)
    yield f"torch >= {TORCH_TESTED[0]}.{TORCH_TESTED[1]} (2.13.0 pinned)", major_minor >= TORCH_TESTED, torch or "missing"
    for package, pin in PINS.items():
        found = _version(package)
        yield f"{package} == {pin}", bool(found) and found.split("+")[0] == pin, found or "missing"
    lab = _version("jupyterlab") or "missing"
    yield "jupyterlab 4.x", lab.startswith("4."), lab
    ext = Path(sys.prefix, "share", "jupyter", "labextensions", "@jupyter", "nbgrader")
    yield "nbgrader JupyterLab extension (Validate button)", ext.is_dir(), str(ext)
    server = Path(sys.prefix, "etc", "jupyter", "jupyter_server_config.d")
    enabled = any("validate_assignment" in json.dumps(json.loads(p.read_text()))
                  for p in server.glob("nbgrader*.json")) if server.is_dir() else False
    yield "nbgrader validate server extension enabled", enabled, str(server)
    alembic = shutil.which("alembic", path=str(Path(sys.executable).parent))
    yield "alembic next to python (nbgrader runs it)", alembic is not None, alembic or "missing"
    try:
        from jupyter_client.kernelspec import KernelSpecManager
        argv = KernelSpecManager().get_kernel_spec("python3").argv
        same = Path(argv[0]).resolve() == Path(sys.executable).resolve() or argv[0] in ("python", "python3")
        yield "python3 kernel runs this environment", same, argv[0]
    except Exception as e:
        yield "python3 kernel runs this environment", False, str(e)
    try:
        from utils.tokenizer import encode, gpt2_files
        gpt2_files()
        ids = encode("Hello, world")
        yield "GPT-2 tokenizer offline (sha256-checked files)", ids == [15496, 11, 995], str(ids)
    except Exception as e:
        yield "GPT-2 tokenizer offline (sha256-checked files)", False, str(e)


def main() -> int:
    failed = 0
    for name, ok, detail in checks():
        failed += not ok
        print(f"{'OK  ' if ok else 'FAIL'}  {name:<48} {detail}")
    print("environment ready" if not failed else f"{failed} requirement(s) failed: run `make env` again")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
