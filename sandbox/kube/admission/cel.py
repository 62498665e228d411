"""``matchConditions``: CEL expressions checked with cel-python, evaluated natively.

Two well-kept implementations, each where it is strong: cel-python (``celpy``) gives the
parse tree the configuration check below walks; ``common-expression-language`` (``cel``,
the Rust ``cel`` interpreter) evaluates — about 0.1 ms per pod for the chart's
conditions, where cel-python's tree-walking interpreter took 20–30 ms of the emulator's
one event loop per create, more than everything else a create costs.

The apiserver binds ``object``, ``oldObject``, ``request`` and ``authorizer``; the
sandbox binds the first three (no authorizer). A configuration is checked when it is
written: an expression must parse, reference no variable but those three (comprehension
variables of ``all``/``exists``/``exists_one``/``map``/``filter`` aside) and call only
functions cel-python provides — the Kubernetes CEL extension libraries (``lowerAscii``,
``quantity``, ``url``, …) are not available. Evaluation follows the apiserver's matcher:
any ``false`` skips the webhook; otherwise errors resort to the failure policy.
Source: kubernetes/apiserver ``pkg/admission/plugin/webhook/matchconditions/matcher.go``.
Each condition is evaluated with its variables cut down to what it can read
(``reach``): the interpreter converts every value it is given, and a pod's conversion
cost far more than the chart's condition.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import cel
import celpy
import celpy.celparser
import celpy.evaluation
import lark

from sandbox.kube.admission.reach import Reach, narrowed, reach

#: Variables bound for every evaluation.
BOUND_VARIABLES = frozenset({"object", "oldObject", "request"})
#: Macros: the first argument of the comprehension ones names a local variable.
_COMPREHENSIONS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_MACROS = _COMPREHENSIONS | {"has"}
_FUNCTIONS = frozenset(celpy.evaluation.base_functions) | _MACROS | {"dyn"}

_ENV = celpy.Environment()


class CELError(ValueError):
    """An expression that does not compile, or an evaluation that failed."""


@dataclass(frozen=True)
class Condition:
    """One compiled ``matchConditions`` entry."""

    name: str
    expression: str
    #: The native program (``cel.compile``).
    program: Any
    #: What the expression can read of each variable it reads (``reach``).
    reads: Mapping[str, Reach]


@dataclass(frozen=True)
class MatchOutcome:
    """``matches`` False with ``error`` None means a condition said no."""

    matches: bool
    error: str | None = None


def compile_condition(name: str, expression: str) -> Condition:
    """Compile ``expression``; raises ``CELError`` for a parse error or unbound names.

    The check is cached; the native program is made anew for each condition, so a
    program is used only by the configuration (and the emulator thread) that compiled
    it. Configurations are compiled when they change, not per request."""
    _check(expression)
    reads = reach(_tree(expression), BOUND_VARIABLES)
    try:
        return Condition(name, expression, cel.compile(expression), reads)
    except ValueError as exc:  # a parse the two disagree on: refuse it too
        raise CELError(f"compilation failed: {str(exc).splitlines()[0]}") from exc


@functools.lru_cache(maxsize=512)
def _tree(expression: str) -> lark.Tree[Any]:
    """The parse tree (shared: never changed by its readers)."""
    try:
        tree: lark.Tree[Any] = _ENV.compile(expression)
    except celpy.celparser.CELParseError as exc:
        raise CELError(f"compilation failed: {str(exc).splitlines()[0]}") from exc
    return tree


@functools.lru_cache(maxsize=512)
def _check(expression: str) -> None:
    tree = _tree(expression)
    unknown = sorted(free_variables(tree) - BOUND_VARIABLES)
    if unknown:
        raise CELError(f"undeclared reference to '{unknown[0]}'")
    unknown_calls = sorted(called_functions(tree) - _FUNCTIONS)
    if unknown_calls:
        raise CELError(f"found no matching overload for '{unknown_calls[0]}'")


def free_variables(tree: lark.Tree[Any], bound: frozenset[str] = frozenset()) -> set[str]:
    """Root identifiers the expression reads that no comprehension binds."""
    if tree.data == "ident":
        return {str(tree.children[0])} - bound
    if tree.data == "member_dot_arg" and str(tree.children[1]) in _COMPREHENSIONS:
        target, _, args = tree.children
        found = free_variables(_as_tree(target), bound)
        exprs = _subtrees(_as_tree(args).children)
        if not exprs:
            return found
        local = _comprehension_variable(exprs[0])
        for expr in exprs[1:]:
            found |= free_variables(expr, bound | {local})
        return found
    found = set()
    for child in _subtrees(tree.children):
        found |= free_variables(child, bound)
    return found


def called_functions(tree: lark.Tree[Any]) -> set[str]:
    """Names of every global function and method the expression calls."""
    found: set[str] = set()
    for node in tree.iter_subtrees():
        if node.data in ("ident_arg", "member_dot_arg"):
            index = 0 if node.data == "ident_arg" else 1
            found.add(str(node.children[index]))
    return found


def _comprehension_variable(expr: lark.Tree[Any]) -> str:
    idents = [n for n in expr.iter_subtrees() if n.data == "ident"]
    if len(idents) != 1:
        raise CELError("the first argument of a comprehension must be a simple identifier")
    return str(idents[0].children[0])


def _subtrees(children: Iterable[Any]) -> list[lark.Tree[Any]]:
    return [c for c in children if isinstance(c, lark.Tree)]


def _as_tree(node: Any) -> lark.Tree[Any]:
    if not isinstance(node, lark.Tree):
        raise CELError("unexpected expression structure")
    return node


def evaluate(condition: Condition, activation: Mapping[str, Any]) -> bool:
    """Run one condition (on what it can read of ``activation``); raises ``CELError``
    on an error or a non-boolean result."""
    try:
        result = condition.program.execute(narrowed(activation, condition.reads))
    except (RuntimeError, TypeError, ValueError, LookupError, ArithmeticError) as exc:
        raise CELError(_eval_message(condition, exc)) from exc
    if not isinstance(result, bool):
        raise CELError(f"expression '{condition.expression}' must evaluate to bool")
    return result


def _eval_message(condition: Condition, exc: BaseException) -> str:
    detail = exc.args[0] if exc.args else type(exc).__name__
    return f"expression '{condition.expression}' resulted in error: {detail}"


def activation(
    obj: dict[str, Any] | None, old: dict[str, Any] | None, request: dict[str, Any]
) -> dict[str, Any]:
    """The CEL variables for one call (plain JSON values: the native interpreter
    converts them itself)."""
    return {"object": obj, "oldObject": old, "request": request}


def match(conditions: Iterable[Condition], variables: Mapping[str, Any]) -> MatchOutcome:
    """The apiserver's rule: a ``false`` wins; else any error is reported; else a match."""
    errors: list[str] = []
    for condition in conditions:
        try:
            if not evaluate(condition, variables):
                return MatchOutcome(False)
        except CELError as exc:
            errors.append(str(exc))
    if errors:
        return MatchOutcome(False, "; ".join(errors) if len(errors) > 1 else errors[0])
    return MatchOutcome(True)
