"""What of its variables a CEL expression can read, and the variables cut down to that.

The native interpreter converts every variable it is given into CEL values before it
evaluates anything — about 2 µs per map entry, ≈ 0.16 ms for a defaulted pod, where the
chart's condition itself takes a few µs. An expression can only read what its field
selections lead to, so the emulator hands it only that: a ``Reach`` per variable, found
once when the condition is compiled, and ``narrow`` applied per evaluation.

A ``Reach`` is a tree of the paths read: ``whole`` (the value is used as a value —
compared, passed to a function or a method, indexed, tested with ``has``), ``fields``
(the members selected from it), ``each`` (it is the target of a comprehension: what the
comprehension variable reads of each element). Conservative everywhere it cannot tell:
an index, a method call or a function argument keeps the whole value; a map a
comprehension iterates is kept whole; a list whose members are selected (a type error
either way) is kept whole. ``narrow`` keeps exactly what was read — a map keeps its
selected members that are present, a list its elements each narrowed, anything else as
it is — so every selection, ``has`` test, comprehension and error of the expression
meets the same values as on the whole variable. No side effects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import lark

#: Comprehension macros: ``target.macro(var, expr…)``.
COMPREHENSIONS = frozenset({"all", "exists", "exists_one", "map", "filter"})
#: Of those, the ones whose result carries elements of the target on (their readers
#: are not followed: the elements are kept whole).
_YIELDING = frozenset({"map", "filter"})
#: Nodes that only wrap their one child (the grammar's precedence levels, parentheses).
_WRAPPERS = frozenset(
    {
        "expr",
        "conditionalor",
        "conditionaland",
        "relation",
        "addition",
        "multiplication",
        "unary",
        "member",
        "primary",
        "paren_expr",
    }
)


@dataclass
class Reach:
    """What is read of one value (see the module docstring)."""

    whole: bool = False
    fields: dict[str, Reach] = field(default_factory=dict)
    each: Reach | None = None

    def member(self, name: str) -> Reach:
        return self.fields.setdefault(name, Reach())

    def element(self) -> Reach:
        if self.each is None:
            self.each = Reach()
        return self.each


def reach(tree: lark.Tree[Any], variables: frozenset[str]) -> dict[str, Reach]:
    """What the expression ``tree`` reads of each of ``variables`` (a variable it never
    reads is absent)."""
    roots = {name: Reach() for name in variables}
    _used(_visit(tree, roots))
    return {
        name: found for name, found in roots.items() if found.whole or found.fields or found.each
    }


def narrow(value: Any, read: Reach) -> Any:
    """``value`` cut down to what ``read`` reaches (shares what it keeps whole)."""
    if read.whole:
        return value
    if type(value) is dict:
        if read.each is not None:
            return value  # a map iterated: its keys, and so the whole map
        return {k: narrow(value[k], sub) for k, sub in read.fields.items() if k in value}
    if type(value) is list and read.each is not None and not read.fields:
        return [narrow(item, read.each) for item in value]
    return value


def narrowed(variables: Mapping[str, Any], reads: Mapping[str, Reach]) -> dict[str, Any]:
    """The variables an expression with ``reads`` is evaluated with: each cut down, and
    the ones it never reads bound to null."""
    return {
        name: narrow(value, reads[name]) if name in reads else None
        for name, value in variables.items()
    }


def _used(found: Reach | None) -> None:
    if found is not None:
        found.whole = True


def _trees(children: list[Any]) -> list[lark.Tree[Any]]:
    return [c for c in children if isinstance(c, lark.Tree)]


def _visit(node: lark.Tree[Any], env: dict[str, Reach]) -> Reach | None:
    """The ``Reach`` of the value ``node`` evaluates to when it is a variable's path
    (its caller decides how it is read), else None, with everything ``node`` reads
    inside it recorded."""
    kind, children = node.data, node.children
    if kind == "ident":
        return env.get(str(children[0]))
    if kind in _WRAPPERS and len(children) == 1 and isinstance(children[0], lark.Tree):
        return _visit(children[0], env)
    if kind == "member_dot" and isinstance(children[0], lark.Tree):
        target = _visit(children[0], env)
        return target.member(str(children[1])) if target is not None else None
    if kind == "member_dot_arg" and str(children[1]) in COMPREHENSIONS:
        _comprehension(node, env)
        return None
    for child in _trees(children):
        _used(_visit(child, env))
    return None


def _comprehension(node: lark.Tree[Any], env: dict[str, Reach]) -> None:
    """``target.macro(var, expr…)``: each element read as ``var`` is read in the body."""
    target_node, macro, *rest = node.children
    target = _visit(target_node, env) if isinstance(target_node, lark.Tree) else None
    args = _trees(rest[0].children) if rest and isinstance(rest[0], lark.Tree) else []
    name = _variable(args[0]) if args else None
    if target is None or name is None or str(macro) in _YIELDING:
        _used(target)
        inner = env
    else:
        inner = {**env, name: target.element()}
    for arg in args[1:]:
        _used(_visit(arg, inner))


def _variable(expr: lark.Tree[Any]) -> str | None:
    """The identifier a comprehension's first argument names (None: not a bare one)."""
    idents = [n for n in expr.iter_subtrees() if n.data == "ident"]
    return str(idents[0].children[0]) if len(idents) == 1 else None
