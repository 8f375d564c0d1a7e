"""Mutants of a model answer: the same solution cell with one small change, made on its syntax tree.

Mechanical changes (operators swapped, constants changed, comparisons off by one, a keyword
argument dropped, a sign dropped, a cast or `.contiguous()` or `.clone()` dropped, a branch
taken for both values of its condition) and structural ones that a fresh read of learners'
wrong solutions suggests (a computed size or stride replaced by the constant it was on the first
probe; a copy replaced by an alias; a `dtype=`/`device=` argument dropped). Only code inside the
cell's functions and classes is changed. `mutants(source)` lists them in a fixed order:
(description, mutated source).
"""
import ast
import copy

_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
         ast.Pow: ast.Mult, ast.Mod: ast.FloorDiv}
_COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
            ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_DROPPED_CALLS = {"contiguous", "clone", "float", "double", "detach", "to", "type_as", "item"}
_SIZES = {"size", "stride", "dim"}
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Pow: "**", ast.Mod: "%",
        ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is", ast.IsNot: "is not"}


def _inside_definitions(tree) -> list:
    """The nodes of the cell's function and class bodies, in a fixed order (a walk of each)."""
    nodes = []
    for top in tree.body:
        if isinstance(top, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            for stmt in top.body:
                nodes.extend(ast.walk(stmt))
    return nodes


def _size_site(node) -> bool:
    """x.shape[i], x.size(i), x.stride(i), len(x): a size computed at run time."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
        return True
    if isinstance(node, ast.Call) and not node.keywords:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _SIZES and len(node.args) == 1:
            return True
        if isinstance(func, ast.Name) and func.id == "len" and len(node.args) == 1:
            return True
    return False


def _changes(node, sizes: dict) -> list:
    """(description, new node or a function of the parent) for one node."""
    out = []
    line = getattr(node, "lineno", 0)
    if isinstance(node, ast.BinOp) and type(node.op) in _SWAP:
        new = copy.copy(node)
        new.op = _SWAP[type(node.op)]()
        out.append((f"line {line}: {_OPS[type(node.op)]} -> {_OPS[type(new.op)]}", new))
        out.append((f"line {line}: ({ast.unparse(node)}) -> its left operand", node.left))
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
        new = copy.copy(node)
        new.ops = [_COMPARE[type(node.ops[0])]()]
        out.append((f"line {line}: {_OPS[type(node.ops[0])]} -> {_OPS[type(new.ops[0])]}", new))
    if isinstance(node, ast.Constant) and type(node.value) in (int, float) and not isinstance(node.value, bool):
        v = node.value
        for w in ([v + 1, v - 1] if isinstance(v, int) else [v * 2, v / 2] if v else [1e-3, -1e-3]):
            out.append((f"line {line}: constant {v!r} -> {w!r}", ast.Constant(w)))
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        out.append((f"line {line}: {node.value} -> {not node.value}", ast.Constant(not node.value)))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not, ast.Invert)):
        out.append((f"line {line}: {ast.unparse(node)} -> {ast.unparse(node.operand)}", node.operand))
    if isinstance(node, ast.Call):
        for i, kw in enumerate(node.keywords):
            if kw.arg is not None:
                new = copy.copy(node)
                new.keywords = node.keywords[:i] + node.keywords[i + 1:]
                out.append((f"line {line}: keyword {kw.arg}= dropped", new))
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _DROPPED_CALLS:
            out.append((f"line {line}: .{func.attr}(...) dropped (an alias or the old dtype)", func.value))
    if isinstance(node, ast.If):
        for value in (True, False):
            new = copy.copy(node)
            new.test = ast.Constant(value)
            out.append((f"line {line}: if {ast.unparse(node.test)} -> if {value}", new))
    if isinstance(node, ast.IfExp):
        out.append((f"line {line}: conditional -> its first branch", node.body))
        out.append((f"line {line}: conditional -> its second branch", node.orelse))
    if _size_site(node) and sizes.get(id(node)) is not None:
        value = sizes[id(node)]
        out.append((f"line {line}: {ast.unparse(node)} -> the constant {value!r} (its value on the first probe)", ast.Constant(value)))
    return out


class _Replace(ast.NodeTransformer):
    def __init__(self, target, new):
        self.target, self.new = target, new

    def generic_visit(self, node):
        for field, value in ast.iter_fields(node):
            if isinstance(value, list):
                setattr(node, field, [self.new if v is self.target else v for v in value])
            elif value is self.target:
                setattr(node, field, self.new)
        return super().generic_visit(node)


def sites(tree) -> list:
    return [n for n in _inside_definitions(tree) if _size_site(n)]


def mutants(source: str, sizes: dict | None = None) -> list[tuple[str, str]]:
    """(description, mutated source) of every mutant of the cell, in a fixed order. `sizes`:
    {index of a size site in `sites(tree)`: its value on the first probe}."""
    tree = ast.parse(source)
    nodes = _inside_definitions(tree)
    size_nodes = sites(tree)
    by_id = {id(n): (sizes or {}).get(i) for i, n in enumerate(size_nodes)}
    found, seen = [], set()
    for index, node in enumerate(nodes):
        for description, new in _changes(node, by_id):
            mutated = copy.deepcopy(tree)
            target = _inside_definitions(mutated)[index]
            replacement = copy.deepcopy(new) if new is not node else new
            replacement = _map_into(replacement, node, target)
            _Replace(target, replacement).visit(mutated)
            try:
                text = ast.unparse(ast.fix_missing_locations(mutated))
            except Exception:  # a change the grammar does not allow here
                continue
            if text not in seen:
                seen.add(text)
                found.append((description, text))
    return found


def _map_into(replacement, original, target):
    """The replacement built from the original tree, rebuilt from the copy's nodes where it reuses
    a child of the original node (node.left, node.operand): the copy's child is the same code."""
    if replacement is original:
        return target
    for field, value in ast.iter_fields(original):
        if value is replacement:  # the new node is a child of the original: take the copy's child
            return getattr(target, field)
    return replacement


def instrumented(source: str) -> tuple[str, int]:
    """The cell with every size site wrapped in `__size__(i, expr)`, which records its first value."""
    tree = ast.parse(source)
    size_nodes = sites(tree)
    for i, node in enumerate(size_nodes):
        wrapped = ast.Call(ast.Name("__size__", ast.Load()), [ast.Constant(i), copy.deepcopy(node)], [])
        _Replace(node, wrapped).visit(tree)
    return ast.unparse(ast.fix_missing_locations(tree)), len(size_nodes)
