"""The second half of the grading guard: the course's own modules (autograder.*, utils.*), run
afresh from their files when the notebook changed them. Never imported: GradingExecute sends it
with autograder/kernel_guard.py as one text, run in one namespace, so the names of either file
(_record, _MISSING, ...) are the other's too; `refresh` in kernel_guard.py calls these.
"""
import _imp
import copy
import importlib
import importlib.util
import marshal
import os
import sys
import types

_OWN = ("utils", "autograder")  # the packages whose modules the guard keeps fresh

# The course's own modules ----------------------------------------------------------------
def _own(name: str) -> bool:
    return name.split(".")[0] in _OWN


def _file_of(root: str, name: str):
    base = os.path.join(root, *name.split("."))
    if os.path.isfile(os.path.join(base, "__init__.py")):
        return os.path.join(base, "__init__.py"), [base]
    if os.path.isfile(base + ".py"):
        return base + ".py", None
    return None, None


def _compiled(state, path: str):
    with open(path, "rb") as f:
        data = f.read()
    source = data.decode("utf-8")
    cached = state["code"].get(path)
    if cached is None or cached[0] != source:
        cached = (source, _cached_code(state, path, data) or compile(source, path, "exec", dont_inherit=True))
        state["code"][path] = cached
    return cached[1]


def _cached_code(state, path: str, data: bytes):
    """The file's code from its __pycache__ entry beside it, when that entry is of this Python and
    of this source (the checks Python's own import makes: its size and modification time, or its
    hash): compiling the course's modules afresh cost 4 ms each, 0.2 s of a submit. None
    otherwise. The entry's name and magic number are the ones start() recorded, and its folder is
    the file's own, whatever sys.pycache_prefix the notebook set."""
    magic, tag = state["pyc"]
    folder, file = os.path.split(path)
    try:
        with open(os.path.join(folder, "__pycache__", f"{file[:-3]}.{tag}.pyc"), "rb") as f:
            pyc = f.read()
        if pyc[:4] != magic:
            return None
        if int.from_bytes(pyc[4:8], "little") & 1:  # hash-based
            if pyc[8:16] != importlib.util.source_hash(data):
                return None
        else:
            st = os.stat(path)
            if (int.from_bytes(pyc[8:12], "little"), int.from_bytes(pyc[12:16], "little")) != (
                    int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF) or st.st_size != len(data):
                return None
        code = marshal.loads(pyc[16:])
        if not isinstance(code, types.CodeType):
            return None
        _imp._fix_co_filename(code, path)  # as Python's import does: the entry may name the file by another path
        return code
    except (OSError, ValueError, EOFError, TypeError, NotImplementedError):
        return None


class _Loader:
    """Runs a course module's file in the module object that the kernel already knows (so the
    learner's references to it see the fresh contents), or in a new one."""

    def __init__(self, state, path, old):
        self.state, self.path, self.old = state, path, old

    def create_module(self, spec):
        if type(self.old) is types.ModuleType:
            vars(self.old).clear()
            return self.old
        return None

    def exec_module(self, module):
        exec(_compiled(self.state, self.path), vars(module))
        self.state["own"][module.__name__] = _fingerprint(module)  # as its file defined it


class _Finder:
    def __init__(self, state, root, old):
        self.state, self.root, self.old = state, root, old

    def find_spec(self, name, path=None, target=None):
        if not _own(name):
            return None
        file, search = _file_of(self.root, name)
        if file is None:
            return None
        return importlib.util.spec_from_file_location(name, file, submodule_search_locations=search,
                                                      loader=_Loader(self.state, file, self.old.get(name)))


def _fingerprint(module):
    """What a module held right after the course's file defined it: every attribute by
    identity, the insides of the functions and classes it defines, copies of its data."""
    name = module.__name__
    entries = {k: v for k, v in vars(module).items() if not _submodule(name, k, v)}
    owners, data = [], []
    for key, value in entries.items():
        if isinstance(value, type) and value.__module__ == name:
            owners.append(value)
        elif key.startswith("__"):  # __builtins__, __path__, ...: compared by identity above
            continue
        elif isinstance(value, (list, dict, set, tuple)):
            data.append((key, _data_copy(value)))
        elif type(value).__name__ in ("Tensor", "Parameter") and type(value).__module__.startswith("torch"):
            data.append((key, ("tensor", value.detach().clone())))
    classes, functions = _record(owners)
    for value in entries.values():  # also what it imported from another course module
        if _own(getattr(value, "__module__", None) or ""):
            functions += [_internals(f) for f in _functions_of(value)]
    return module, entries, classes, functions, data


def _intact(fingerprint) -> bool:
    import torch

    module, entries, classes, functions, data = fingerprint
    current = {k: v for k, v in vars(module).items() if not _submodule(module.__name__, k, v)}
    if current.keys() != entries.keys() or any(current[k] is not v for k, v in entries.items()):
        return False
    for owner, saved, _ in classes:
        now = vars(owner)
        if now.keys() != saved.keys() or any(now[k] is not v for k, v in saved.items()):
            return False
    for fn, code, defaults, kwdefaults, cells in functions:
        if fn.__code__ is not code or fn.__defaults__ is not defaults or fn.__kwdefaults__ is not kwdefaults:
            return False
        if any(v is not _MISSING and (not _filled(c) or c.cell_contents is not v)
               for c, v in zip(fn.__closure__ or (), cells)):
            return False
    for key, (kind, value) in data:
        now = current[key]
        try:
            if kind == "tensor":
                if now.dtype != value.dtype or now.shape != value.shape or not torch.equal(now, value):
                    return False
            elif kind == "equal":
                if not bool(now == value):
                    return False
            elif len(now) != len(value) or any(a is not b for a, b in zip(_items(now), _items(value))):
                return False
        except Exception:
            return False
    return True


def _submodule(name: str, key: str, value) -> bool:
    """A package's attribute that is its own loaded submodule (set by the import system)."""
    return isinstance(value, types.ModuleType) and sys.modules.get(f"{name}.{key}") is value


def _data_copy(value):
    """A deep copy compared by ==, or else the items compared by identity (a list of modules)."""
    try:
        copied = copy.deepcopy(value)
        if bool(copied == value):
            return "equal", copied
    except Exception:
        pass
    return "items", list(_items(value))


def _items(value):
    return [x for pair in value.items() for x in pair] if isinstance(value, dict) else list(value)



def _own_intact(own: dict, name: str) -> bool:
    fingerprint = own.get(name)
    return fingerprint is not None and fingerprint[0] is sys.modules.get(name) and _intact(fingerprint)
