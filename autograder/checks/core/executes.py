"""The shortcut rule enforced by what EXECUTES (shortcuts.py builds on this module, never the other way): while the learner's code runs inside a check, the
code objects of the exercise's reference must not run, whatever route reaches them (a class body
that takes a method from the reference class, a reference function kept under another name, a
helper of the reference module declared as the learner's to write). `forbid` (shortcuts.py)
compares objects and names what was called; this watch catches the rest by comparing each new
frame's code object with the forbidden set.

Cost: a 'call' trace event per Python frame while a check's `own_work` block is open; the trace
function returns None, so no line events are traced."""
import contextlib
import sys
import types

from autograder.checks import Shortcut, message

_watched: list = []  # stack of {code: (what, en, zh)}, one per open `watching` block
_tripped: list = []  # the first Shortcut raised, kept in case the learner's code swallows it
_active: dict = {}  # the union of the open blocks' tables: one lookup per frame


def code_objects(obj, unwrap) -> dict:
    """{code: its qualified name} for what a reference object runs: a function's code (and the
    functions nested in it), or the code of a class's own methods and properties (not inherited
    ones: an earlier notebook's class stays allowed)."""
    obj = unwrap(obj)
    parts = []
    if isinstance(obj, type):
        for value in vars(obj).values():
            parts += [value.fget, value.fset, value.fdel] if isinstance(value, property) else [value]
    else:
        parts = [obj]
    found = {}
    for part in parts:
        if isinstance(f := unwrap(part), types.FunctionType):
            name = f"{f.__module__}.{f.__qualname__}"
            found.update({code: name for code in _nested(f.__code__)})
    return found


def _nested(code: types.CodeType) -> list:
    found = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found += _nested(const)
    return found


def _trace(frame, event, arg):
    if event == "call":
        hit = _active.get(id(frame.f_code))
        if hit is not None and hit[0] is frame.f_code:  # identity: equal code objects can live in two files
            _, what, en, zh = hit
            error = Shortcut(message(en, zh, f"{what} ran while your code ran"))
            if not _tripped:
                _tripped.append(error)
            raise error
    return None


def _merge():
    _active.clear()
    for table in _watched:
        _active.update(table)


def _chained(previous):
    """Our watch in front of a tracer that was there before (a debugger, coverage)."""
    def trace(frame, event, arg):
        _trace(frame, event, arg)
        return previous(frame, event, arg)
    return trace


@contextlib.contextmanager
def watching(table: dict):
    """While the block runs, a frame running `code` raises Shortcut, for each entry
    id(code): (code, what, en, zh) of `table`. The first such Shortcut is raised again when the block ends,
    even if the learner's code caught it. Only the thread that opens the block is watched
    (autograd runs the backward of CPU tensors on the calling thread)."""
    if not table:
        yield
        return
    previous = sys.gettrace()
    outermost = not _watched
    _watched.append(table)
    _merge()
    if outermost:
        _tripped.clear()
        sys.settrace(_trace if previous is None else _chained(previous))
    try:
        yield
    finally:
        _watched.pop()
        _merge()
        if outermost:
            sys.settrace(previous)
    if outermost and _tripped:
        raise _tripped.pop()


# (owner, attribute, original, blocked) of every target blocked now: the check's own runs of the
# reference (executes.course_runs) lift them for their duration.
BLOCKED: list = []


@contextlib.contextmanager
def unblocked():
    """Inside a forbid block: the check runs the course's code, which may use what is blocked."""
    entries = list(BLOCKED)
    for owner, attr, original, _ in reversed(entries):
        setattr(owner, attr, original)
    try:
        yield
    finally:
        for owner, attr, _, blocked in entries:
            setattr(owner, attr, blocked)


@contextlib.contextmanager
def course_runs():
    """Inside a `watching` block: the check itself runs the course's reference (to compute what
    the learner's output should be); nothing is watched, and nothing blocked, until the block ends."""
    saved, previous = _watched[:], sys.gettrace()
    _watched.clear()
    _merge()
    sys.settrace(None)
    try:
        with unblocked():  # and the names own_work blocks are the course's own again
            yield
    finally:
        _watched[:] = saved
        _merge()
        sys.settrace(previous)


class _Ran:
    count = 0


@contextlib.contextmanager
def ran(code):
    """Counts the calls of `code` (a code object, or None: nothing to count) while the block runs:
    where the contract says how the work is done ("backward calls your flash_attention_backward"),
    the check sees it happen, by whatever route. A profile hook, beside the trace of `watching`."""
    seen = _Ran()
    if code is None:
        yield seen
        return
    previous = sys.getprofile()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is code:
            seen.count += 1
        if previous is not None:
            previous(frame, event, arg)
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(previous)
