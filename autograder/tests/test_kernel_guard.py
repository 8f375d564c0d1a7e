"""The grading guard loads a course module from the bytecode beside it only where that bytecode is
of this Python and of the file as it is now, and names the file by its real path (so that
`inspect.getsource`, which notebook 07 prints, finds it): kernel_guard_modules._cached_code."""
import importlib.util
import inspect
import os
import py_compile
import sys
import time

import pytest

from autograder.preprocessors import GUARD

SOURCE = "def twice(x):\n    return 2 * x\n"


@pytest.fixture
def guard():
    namespace = {"__name__": "__autograder_guard__"}
    exec(compile(GUARD, "<autograder kernel_guard>", "exec"), namespace)
    state = {"pyc": (importlib.util.MAGIC_NUMBER, sys.implementation.cache_tag)}
    return lambda path: namespace["_cached_code"](state, str(path), path.read_bytes())


def course_file(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    path = tmp_path / "pkg" / "helpers.py"
    path.write_text(SOURCE)
    monkeypatch.chdir(tmp_path)
    py_compile.compile("pkg/helpers.py", doraise=True)  # recorded under a relative name, as `compileall utils` does
    return path


def test_matching_bytecode_is_used_and_names_the_real_file(tmp_path, monkeypatch, guard):
    path = course_file(tmp_path, monkeypatch)
    code = guard(path)
    assert code is not None and code.co_filename == str(path)
    namespace = {}
    exec(code, namespace)
    monkeypatch.chdir("/")  # found from anywhere, as in a grading kernel
    assert namespace["twice"](3) == 6 and inspect.getsource(namespace["twice"]) == SOURCE


def test_bytecode_of_an_older_file_is_refused(tmp_path, monkeypatch, guard):
    path = course_file(tmp_path, monkeypatch)
    path.write_text(SOURCE.replace("2 * x", "3 * x"))  # same size: the modification time tells
    stamp = time.time() + 5
    os.utime(path, (stamp, stamp))
    assert guard(path) is None


def test_bytecode_of_another_python_is_refused(tmp_path, monkeypatch, guard):
    path = course_file(tmp_path, monkeypatch)
    pyc = importlib.util.cache_from_source(str(path))
    data = bytearray(open(pyc, "rb").read())
    data[0] ^= 0xFF
    open(pyc, "wb").write(bytes(data))
    assert guard(path) is None


def test_no_bytecode_means_compiling(tmp_path, guard):
    path = tmp_path / "alone.py"
    path.write_text(SOURCE)
    assert guard(path) is None
