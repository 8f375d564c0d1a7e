"""The shortcut rule and the learner's namespace: what counts as handing in the course's own
reference, how it is refused while learner code runs, and how a later exercise is graded with the
course's version of an earlier one. Re-exported by `autograder.checks`."""
import contextlib
import functools
import importlib
import pkgutil
import sys
import types

from autograder.checks import Shortcut, message
from autograder.checks.core import rules
from autograder.checks.core.executes import BLOCKED, code_objects, watching

# The rule, course-wide: a shortcut is handing in the exercise's OWN reference, the course's
# code for exactly what the exercise asks you to write: the utils object itself, an alias or a
# wrapper of it (functools.partial, a bound method, a decorator's __wrapped__, a closure), or a
# subclass of a class of the module that holds it. Reusing a class of an EARLIER notebook
# (subclassing notebook 02's SelfAttentionV2 in 04, 04's CausalSelfAttention in 05, 06's
# MultiHeadAttention in 07) is no shortcut: what is graded is the code you write on top of it.
_UTILS_SKIP = {"tests", "benchmark", "check_env"}
# Modules that need an optional package (requirements-triton.txt): guarded once that package is
# imported, as it is by any code that could call them; never imported by the other notebooks' checks.
_UTILS_NEED = {"flash_triton": "triton", "bench_triton": "triton"}


def utils_modules() -> list:
    """Every reference module of utils/, imported, so a learner's late import is guarded too."""
    import utils
    names = [name for name in _module_names(tuple(utils.__path__)) if name not in _UTILS_SKIP
             and not name.startswith("_") and _UTILS_NEED.get(name, "sys") in sys.modules]
    return [m for m in map(_imported, names) if m is not None]


@functools.lru_cache(maxsize=None)
def _module_names(path: tuple) -> tuple:
    """The modules of a package's directory, listed once: every own_work and every probe asks, and
    the directory does not change while a notebook is graded."""
    return tuple(info.name for info in pkgutil.iter_modules(list(path)))


_UNLOADABLE: set = set()  # optional modules that failed once: importing them again fails again


def _imported(name: str):
    """utils.<name>, or None for an optional module that cannot load here: torch's first optimizer
    step imports triton on a machine without a GPU, where utils.flash_triton then refuses to load
    (and so cannot be what a learner called). A failed import is not retried: each try compiles
    and runs the module again (3 of notebook 10's 8 s of MoE checks, on every utils_twins call)."""
    if name in _UNLOADABLE:
        return None
    try:
        return importlib.import_module(f"utils.{name}")
    except ImportError:
        if name in _UTILS_NEED:
            _UNLOADABLE.add(name)
            return None
        raise


def utils_twins(name: str) -> list:
    """(module, attribute) pairs of utils that hold the reference called `name`."""
    return [(m, name) for m in utils_modules() if name in vars(m)]


def unwrap(fn):
    """What a wrapper hands in: a partial's function, a bound method's, a decorator's __wrapped__."""
    for _ in range(100):  # wrappers of wrappers, never an endless chain
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif isinstance(fn, (types.MethodType, staticmethod, classmethod)):
            fn = fn.__func__
        elif isinstance(fn, types.FunctionType) and callable(getattr(fn, "__wrapped__", None)):
            fn = fn.__wrapped__  # functools.wraps, torch.no_grad() as a decorator
        elif triton_kernel(fn):
            fn = fn.fn  # @triton.jit, @triton.autotune: the Python function they compile or interpret
        else:
            break
    return fn


def triton_kernel(obj) -> bool:
    """A Triton kernel (JITFunction, InterpretedFunction, Autotuner, ...): launched as kernel[grid](...)."""
    return type(obj).__module__.startswith("triton.") and hasattr(obj, "fn") and hasattr(obj, "run")


class _Blocked:
    """What a forbidden target becomes while learner code runs: calling it, or launching it as a
    Triton kernel (kernel[grid](...)), raises Shortcut with the exercise's sentence."""

    def __init__(self, what: str, en: str, zh: str, original):
        self.what, self.en, self.zh, self.original = what, en, zh, original

    def __call__(self, *args, **kwargs):
        raise Shortcut(message(self.en, self.zh, f"your code called {self.what}"))

    def __getitem__(self, grid):
        raise Shortcut(message(self.en, self.zh, f"your code launched {self.what}"))


def _from_utils(obj) -> bool:
    return (getattr(unwrap(obj), "__module__", None) or "").split(".")[0] == "utils"


def _learner_classes(fn) -> list:
    klass = fn if isinstance(fn, type) else type(fn)
    return [k for k in klass.__mro__
            if not _from_utils(k) and (getattr(k, "__module__", None) or "").split(".")[0] != "torch"]


def learner_functions(fn) -> list:
    """The functions whose globals hold the learner's names: fn itself (unwrapped), or the own
    methods of a class (or of a callable object's class)."""
    fn = unwrap(fn)
    if isinstance(fn, types.FunctionType):
        return [fn]
    return [f for klass in _learner_classes(fn) for v in vars(klass).values()
            if isinstance(f := unwrap(v), types.FunctionType)]


def _reference_modules(name: str) -> set:
    """The modules that define the reference called `name` (not those that only import it)."""
    return {getattr(getattr(m, attr), "__module__", m.__name__) for m, attr in utils_twins(name)}


def _describe_target(owner, attr) -> str:
    return f"{getattr(owner, '__name__', type(owner).__name__)}.{attr}"


@contextlib.contextmanager
def forbid(targets, learner_fns, en: str, zh: str):
    """Make `targets` raise Shortcut while learner code runs; restore them afterwards.

    targets: (owner, attribute) pairs such as (torch, "softmax"). The learner's own references
    to one of the originals are replaced too: names in their globals (`from torch import softmax
    as sm`), closure cells, default arguments and class attributes, so an alias or a wrapper is
    no way around the rule. The message's evidence names what was called.
    """
    utils_modules()  # import the course's modules first: one imported while a target is blocked would keep the block
    restore = []  # callables that put one original back
    try:
        blocked_for = []  # (original, blocked)
        for owner, attr in targets:
            original = getattr(owner, attr)
            real = original.original if isinstance(original, _Blocked) else original  # blocked already by an outer forbid
            blocked = _Blocked(_describe_target(owner, attr), en, zh, real)
            blocked_for.append((real, blocked))
            own = attr in vars(owner)
            setattr(owner, attr, blocked)
            restore.append(lambda o=owner, a=attr, v=original, own=own: setattr(o, a, v) if own else delattr(o, a))
            BLOCKED.append((owner, attr, real, blocked))
            restore.append(lambda entry=BLOCKED[-1]: BLOCKED.remove(entry))

        def swap(value):
            return next((b for o, b in blocked_for if value is o or unwrap(value) is o), None)

        for fn in learner_fns:
            namespace = getattr(fn, "__globals__", None) or {}
            for key, value in list(namespace.items()):
                if (b := swap(value)) is not None:
                    namespace[key] = b
                    restore.append(lambda n=namespace, k=key, v=value: n.__setitem__(k, v))
            for cell in getattr(fn, "__closure__", None) or ():
                try:
                    value = cell.cell_contents
                except ValueError:  # an empty cell
                    continue
                if (b := swap(value)) is not None:
                    cell.cell_contents = b
                    restore.append(lambda c=cell, v=value: setattr(c, "cell_contents", v))
            defaults = getattr(fn, "__defaults__", None)
            if defaults and any(swap(d) is not None for d in defaults):
                fn.__defaults__ = tuple(swap(d) or d for d in defaults)
                restore.append(lambda f=fn, d=defaults: setattr(f, "__defaults__", d))
        yield
    finally:
        for put_back in reversed(restore):
            put_back()


def _class_attributes(fn, originals, en, zh):
    """A learner class that keeps the reference as a class attribute hands it in."""
    for klass in _learner_classes(fn) if isinstance(fn, type) else ():
        for key, value in vars(klass).items():
            if any(unwrap(value) is o for o in originals):
                raise Shortcut(message(en, zh, f"{klass.__name__}.{key} is the course's {_qualified(unwrap(value))}"))


def _qualified(obj) -> str:
    return f"{obj.__module__}.{getattr(obj, '__qualname__', type(obj).__name__)}"


@contextlib.contextmanager
def own_work(fn, name: str | None = None, extra=(), en: str | None = None, zh: str | None = None):
    """While learner code runs: the exercise's utils reference and `extra` targets raise Shortcut.

    Raises Shortcut at once when `fn` is (a wrapper of) a utils object, or a class that
    subclasses a class of the utils module holding this exercise's reference; a class of an
    earlier notebook's module may be subclassed (see the rule above). Call the reference only
    outside the `with` block. `extra` are (owner, attribute) pairs such as (torch, "softmax")
    that the exercise asks the learner to write themselves; with no `en` given, calling one of
    them gets its own sentence, which names the function and not utils.
    """
    name = name or getattr(fn, "__name__", "your code")
    inner = unwrap(fn)
    is_class = isinstance(inner, type)
    ref_en = en or (f"This exercise asks you to write {name} yourself, not to hand in the course's reference in utils "
                    f"(the object, an alias, a wrapper{' or a subclass' if is_class else ''} of it)"
                    f"{'; subclassing a class of an earlier notebook is fine' if is_class else ''}.")
    ref_zh = zh or (f"本练习要求你自己实现 {name}，而不是交上 utils 中课程的参考实现（它本身、别名、包装{'或它的子类' if is_class else ''}）"
                    f"{'；继承之前笔记本中的类是可以的' if is_class else ''}。")
    if _from_utils(inner):
        raise Shortcut(message(ref_en, ref_zh, f"{name} is {_qualified(inner)}"))
    twins = utils_twins(name)
    if is_class:
        modules = _reference_modules(name)
        borrowed = [k for k in inner.__mro__[1:] if _from_utils(k) and k.__module__ in modules]
        if borrowed:
            raise Shortcut(message(ref_en, ref_zh, f"{name} subclasses {_qualified(borrowed[0])}, this notebook's own reference"))
        _class_attributes(inner, [getattr(m, a) for m, a in twins], ref_en, ref_zh)
    fns = learner_functions(fn)
    extra, helper_names = declared_rules(name, extra)
    ext_en = en or f"This exercise asks you to write {name} yourself, without the library function that does what it teaches."
    ext_zh = zh or f"本练习要求你自己实现 {name}，不能调用直接完成它所教内容的库函数。"
    helpers = [(m, h) for h in helper_names for m, _ in utils_twins(h)]
    own_en = en or f"This exercise asks you to write {name} yourself, including the part a helper of the course's reference does."
    own_zh = zh or f"本练习要求你自己实现 {name}，包括课程参考实现中由辅助函数完成的那部分。"
    watch = _watch_table([getattr(m, a) for m, a in extra], ext_en, ext_zh)
    watch.update(_watch_table([getattr(m, a) for m, a in helpers], own_en, own_zh))
    watch.update(_watch_table([getattr(m, a) for m, a in twins], ref_en, ref_zh))
    with forbid(twins, fns, ref_en, ref_zh), forbid(extra, fns, ext_en, ext_zh), forbid(helpers, fns, own_en, own_zh), \
            watching(watch):
        yield


def declared_rules(name: str, extra=()) -> tuple[list, tuple]:
    """The (owner, attribute) targets and the helper names refused while `name` runs: its
    contract's (rules.py), and only those. A check that passes a target its contract does not
    declare is a course bug, said at once (test_rules.py runs every check on the model answers)."""
    contract = rules.of(name)
    if contract is None:  # not yet declared: the check's own list
        return list(extra), OWN_HELPERS.get(name, ())
    declared = [f.resolve() for f in contract.forbids]
    for owner, attr in extra:
        if not any(owner is o and attr == a for o, a in declared):
            raise RuntimeError(f"the check of {name} refuses {_describe_target(owner, attr)}, which its contract does not declare")
    for f in contract.forbids:
        rules.record(name, "forbids", f.target)
    for h in contract.helpers:
        rules.record(name, "helpers", h)
    return declared, contract.helpers


# Helpers of a reference module that do part of an exercise's work, which the text asks the
# learner to write (exercise -> utils names): their code must not run while that exercise's code
# runs either. Only helpers that no earlier exercise's course version calls (those may run).
OWN_HELPERS: dict = {
}


def _watch_table(objects, en: str, zh: str) -> dict:
    """{id(code): (code, what ran, en, zh)} for the Python code of `objects` (C functions have none)."""
    return {id(code): (code, f"the course's {qualname}", en, zh)
            for obj in objects for code, qualname in code_objects(_original(obj), unwrap).items()}


def _original(obj):
    return obj.original if isinstance(obj, _Blocked) else obj


# grading a later exercise with the course's version of an earlier one --------------------
@contextlib.contextmanager
def course_versions(fn, replacements: dict):
    """While `fn` (the learner's function or class) runs, the names in `replacements` that its
    code reads from the notebook's globals point at the course's objects, so a mistake in an
    earlier exercise costs points once, in that exercise. Put back afterwards."""
    saved = []
    try:
        for f in learner_functions(fn):
            namespace = f.__globals__
            for name, course in replacements.items():
                if name in namespace and not any(namespace is s[0] and name == s[1] for s in saved):
                    saved.append((namespace, name, namespace[name]))
                    namespace[name] = course
        yield
    finally:
        for namespace, name, value in reversed(saved):
            namespace[name] = value
