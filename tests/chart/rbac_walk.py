"""Which Kubernetes calls each component makes, read from the code, and what the chart grants.

**The code side.** Every call to the API goes through ``shared.gateway.Gateway``, whose
verbs take a ``shared.resources`` constant first. The walker parses every module and
records each call ``<x>.<method>(<resource constant>, ...)`` with ``method`` one of the
gateway's verbs, mapping it to an RBAC verb (``replace`` → ``update``, ``list_all`` →
``list``) and to ``plural`` or ``plural/subresource`` when a ``subresource`` argument is
given (bound by the method's real signature, so positional and keyword forms both
count). A call on ``self.<attr>`` inside a class (a generic helper such as the
reconciler's ``Watched`` cache) is charged, per resource, to every module that
constructs that class with a resource constant as the ``__init__`` argument named
``<attr>``. A gateway call it cannot resolve — a resource or subresource held in a
variable, or a raw ``gateway.request(...)`` — is reported as unresolved, and the test
fails: write the constant at the call site, or teach the walker.

**Attributing shared code.** A component is its own package plus every module of
``shared`` and ``certs`` that package imports, directly or transitively (the import
graph from grimp, the library behind import-linter). So the webhook is charged with
``shared.ledger``'s status writes because it imports the ledger, and ``certs.apply``'s
Secret writes would be charged to any component importing it. This over-approximates
by module, never under-approximates: a shared module a component imports could be
called by it.

**The chart side.** The rules of every Role and ClusterRole bound to the component's
ServiceAccount (taken from its Deployment or Job), as ``(verb, group, resource)``
triples. ``resourceNames`` narrow a rule but do not change the triple.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import grimp

from shared import resources
from shared.gateway import Gateway
from shared.resources import Resource

ROOT = Path(__file__).resolve().parents[2]

#: Gateway method → RBAC verb.
VERBS: dict[str, str] = {
    "get": "get",
    "list_all": "list",
    "watch": "watch",
    "create": "create",
    "replace": "update",
    "patch": "patch",
    "delete": "delete",
}
#: The deployable components: a package each (certs is also the hook Job).
COMPONENTS = ("webhook", "reconciler", "certs")
#: Packages whose modules are charged to the components importing them.
LIBRARIES = ("shared", "certs")

#: The resource constants of ``shared.resources`` by name.
RESOURCE_CONSTANTS: dict[str, Resource] = {
    name: value for name, value in vars(resources).items() if isinstance(value, Resource)
}

Permission = tuple[str, str, str]  # (verb, api group, resource or resource/subresource)


@dataclass(frozen=True)
class Call:
    """One Kubernetes call found in the code."""

    module: str
    line: int
    verb: str
    group: str
    resource: str

    @property
    def permission(self) -> Permission:
        """What RBAC must grant for it."""
        return (self.verb, self.group, self.resource)


@dataclass(frozen=True)
class Unresolved:
    """A gateway call the walker could not read."""

    module: str
    line: int
    why: str


@dataclass(frozen=True)
class Generic:
    """A call on ``self.<attr>`` inside class ``cls``: the resource comes from the
    constructor argument of the same name, so the call is charged, per resource, to
    every module that constructs ``cls`` with a resource constant."""

    module: str
    cls: str
    attr: str
    verb: str
    subresource: str | None


def module_name(path: Path, root: Path = ROOT) -> str:
    """``webhook/cache.py`` → ``webhook.cache``; ``__init__`` names the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resource_names(tree: ast.Module) -> tuple[dict[str, str], set[str]]:
    """Local names bound to resource constants, and aliases of the module itself."""
    constants: dict[str, str] = {}
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "shared.resources":
            for alias in node.names:
                if alias.name in RESOURCE_CONSTANTS:
                    constants[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module == "shared":
            modules.update(a.asname or a.name for a in node.names if a.name == "resources")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "shared.resources":
                    modules.add(alias.asname or alias.name)
    return constants, modules


def _resolve(node: ast.expr, constants: dict[str, str], modules: set[str]) -> Resource | None:
    if isinstance(node, ast.Name) and node.id in constants:
        return RESOURCE_CONSTANTS[constants[node.id]]
    if (
        isinstance(node, ast.Attribute)
        and node.attr in RESOURCE_CONSTANTS
        and ast.unparse(node.value) in modules
    ):
        return RESOURCE_CONSTANTS[node.attr]
    return None


@cache
def _signature(method: str) -> inspect.Signature:
    sig = inspect.signature(getattr(Gateway, method))
    params = list(sig.parameters.values())[1:]  # drop self
    return sig.replace(parameters=params)


def _looks_like_gateway(receiver: ast.expr) -> bool:
    """``gateway``, ``self._gateway``, ``kube``: the object called is a gateway (not
    ``gateway._api.rest_client.pool_manager``, the client's own pool inside it)."""
    last = ast.unparse(receiver).lower().split(".")[-1]
    return "gateway" in last or last in {"kube", "_kube"}


def calls_in(source: str, module: str) -> tuple[list[Call], list[Unresolved]]:
    """The Kubernetes calls of one module's source (generic ones are dropped)."""
    found, unresolved, _ = _calls_and_generics(source, module)
    return found, unresolved


def _calls_and_generics(
    source: str, module: str
) -> tuple[list[Call], list[Unresolved], list[Generic]]:
    tree = ast.parse(source)
    constants, modules = _resource_names(tree)
    owner = _enclosing_classes(tree)
    found: list[Call] = []
    unresolved: list[Unresolved] = []
    generic: list[Generic] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        method, receiver = node.func.attr, node.func.value
        if method == "request" and _looks_like_gateway(receiver):
            unresolved.append(Unresolved(module, node.lineno, "raw gateway.request()"))
            continue
        if method not in VERBS:
            continue
        first = node.args[0] if node.args else _keyword(node, "res")
        res = _resolve(first, constants, modules) if first is not None else None
        sub = _subresource(node, method) if res is not None or _is_self_attr(first) else None
        if isinstance(sub, Unresolved):
            unresolved.append(Unresolved(module, node.lineno, sub.why))
            continue
        if res is None:
            if _is_self_attr(first) and _looks_like_gateway(receiver) and id(node) in owner:
                assert isinstance(first, ast.Attribute)
                generic.append(Generic(module, owner[id(node)], first.attr, VERBS[method], sub))
            elif _looks_like_gateway(receiver):
                why = f"{method}() on a resource the walker cannot name"
                unresolved.append(Unresolved(module, node.lineno, why))
            continue
        plural = f"{res.plural}/{sub}" if sub else res.plural
        found.append(Call(module, node.lineno, VERBS[method], res.group, plural))
    return found, unresolved, generic


def _is_self_attr(node: ast.expr | None) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _enclosing_classes(tree: ast.Module) -> dict[int, str]:
    """``id(call node)`` → name of the class whose body contains it."""
    owner: dict[int, str] = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            owner.setdefault(id(node), cls.name)
    return owner


def _init_params(tree: ast.Module, cls: str) -> list[str]:
    """The positional parameter names of ``cls.__init__`` (without ``self``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    return [a.arg for a in item.args.args[1:]]
    return []


def _constructions(
    source: str, module: str, generic: list[Generic], params: dict[tuple[str, str], list[str]]
) -> list[Call]:
    """Calls charged to ``module`` for each generic class it constructs."""
    tree = ast.parse(source)
    constants, modules = _resource_names(tree)
    imported = {
        (a.asname or a.name): (n.module, a.name)
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module
        for a in n.names
    }
    local = {c.cls: (module, c.cls) for c in generic if c.module == module}
    found: list[Call] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        target = imported.get(node.func.id) or local.get(node.func.id)
        for g in (g for g in generic if target == (g.module, g.cls)):
            names = params.get((g.module, g.cls), [])
            arg = _keyword(node, g.attr)
            if arg is None and g.attr in names and names.index(g.attr) < len(node.args):
                arg = node.args[names.index(g.attr)]
            res = _resolve(arg, constants, modules) if arg is not None else None
            if res is not None:
                plural = f"{res.plural}/{g.subresource}" if g.subresource else res.plural
                found.append(Call(module, node.lineno, g.verb, res.group, plural))
    return found


def _keyword(node: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in node.keywords if k.arg == name), None)


def _subresource(node: ast.Call, method: str) -> str | Unresolved | None:
    """The literal ``subresource`` argument of a gateway call, if any."""
    if any(isinstance(a, ast.Starred) for a in node.args) or any(
        k.arg is None for k in node.keywords
    ):
        return Unresolved("", 0, "*args/**kwargs in a gateway call")
    positional: list[Any] = list(node.args)
    keywords: dict[str, Any] = {k.arg: k.value for k in node.keywords if k.arg}
    try:
        bound = _signature(method).bind_partial(*positional, **keywords)
    except TypeError as exc:
        return Unresolved("", 0, f"arguments do not fit Gateway.{method}: {exc}")
    value = bound.arguments.get("subresource")
    if value is None or (isinstance(value, ast.Constant) and value.value is None):
        return None
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    return Unresolved("", 0, "subresource is not a literal")


def _package_files(package: str, root: Path) -> Iterator[Path]:
    yield from sorted((root / package).rglob("*.py"))


@cache
def _graph() -> Any:
    return grimp.build_graph("shared", "webhook", "reconciler", "certs", cache_dir=None)


def modules_of(component: str) -> set[str]:
    """The component's own modules and the library modules it imports."""
    graph = _graph()
    own = {component, *graph.find_descendants(component)}
    used = {
        m
        for m in graph.find_upstream_modules(component, as_package=True)
        if m.split(".")[0] in LIBRARIES
    }
    return own | used


@dataclass
class Walk:
    """Every call found, per module."""

    calls: dict[str, list[Call]]
    unresolved: list[Unresolved]

    def of(self, component: str) -> list[Call]:
        """The calls charged to ``component``."""
        wanted = modules_of(component)
        return [c for m, found in sorted(self.calls.items()) if m in wanted for c in found]

    def permissions(self, component: str) -> set[Permission]:
        """What ``component`` needs RBAC to grant."""
        return {c.permission for c in self.of(component)}


def walk(root: Path = ROOT, packages: Iterable[str] = ("shared", *COMPONENTS)) -> Walk:
    """Walk the product packages for Kubernetes calls."""
    calls: dict[str, list[Call]] = {}
    unresolved: list[Unresolved] = []
    generic: list[Generic] = []
    sources: dict[str, str] = {}
    for package in packages:
        for path in _package_files(package, root):
            module = module_name(path, root)
            sources[module] = path.read_text(encoding="utf-8")
            found, bad, gen = _calls_and_generics(sources[module], module)
            calls[module] = found
            unresolved += bad
            generic += gen
    params = {(g.module, g.cls): _init_params(ast.parse(sources[g.module]), g.cls) for g in generic}
    for module, source in sources.items():
        calls[module] += _constructions(source, module, generic, params)
    return Walk(calls, unresolved)


# --- the chart side -----------------------------------------------------------------

Obj = dict[str, Any]


def service_account_of(docs: list[Obj], kind: str, component: str) -> str:
    """The ServiceAccount of the component's Deployment or Job."""
    for doc in docs:
        labels = (doc.get("metadata") or {}).get("labels") or {}
        if doc.get("kind") == kind and labels.get("app.kubernetes.io/component") == component:
            return str(doc["spec"]["template"]["spec"]["serviceAccountName"])
    raise LookupError(f"no {kind} for {component}")


def bound_roles(docs: list[Obj], namespace: str, account: str) -> list[Obj]:
    """Roles and ClusterRoles bound to ``system:serviceaccount:<namespace>:<account>``."""
    roles = []
    for binding in docs:
        if binding.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        subjects = binding.get("subjects") or []
        if not any(
            s.get("kind") == "ServiceAccount"
            and s.get("name") == account
            and s.get("namespace") == namespace
            for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        role = next(
            d for d in docs if d.get("kind") == ref["kind"] and d["metadata"]["name"] == ref["name"]
        )
        roles.append(role)
    return roles


def granted(roles: list[Obj]) -> set[Permission]:
    """Every ``(verb, group, resource)`` the rules grant."""
    out: set[Permission] = set()
    for role in roles:
        for rule in role.get("rules") or []:
            for verb in rule.get("verbs") or []:
                for group in rule.get("apiGroups") or []:
                    for res in rule.get("resources") or []:
                        out.add((verb, group, res))
    return out


def mismatch(needed: set[Permission], given: set[Permission]) -> dict[str, list[Permission]]:
    """What RBAC lacks and what it grants beyond the code; empty dict when exact."""
    out: dict[str, list[Permission]] = {}
    if missing := sorted(needed - given):
        out["missing (the code makes these calls)"] = missing
    if extra := sorted(given - needed):
        out["granted but never called"] = extra
    return out
