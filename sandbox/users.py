"""Ordinary users of the sandbox: alice, bob, carol, dave, … with their own credentials.

Each sandbox user owns the namespace named after them (the scenario's ``namespaces``
other than the system ones and the controller's) and has there what a namespace
editor has on a real cluster: a RoleBinding ``edit`` (in their namespace) to the
ClusterRole ``edit`` the emulator starts with (``sandbox.kube.rbac.edit_role``). Their
token authenticates as the user (group ``system:authenticated``, not
``system:masters``), so the chart's ``userAccess`` Role — read of the GPUReservations,
bound to every authenticated user — applies to them once the chart is installed.
What ``edit`` leaves out is refused with the real 403: GPUReservation writes,
``pods/status``, ``pods/binding``, nodes, other users' namespaces.

``user_kubeconfig`` writes one user's kubeconfig (their namespace as the context's);
``python -m sandbox up`` writes ``<state-dir>/users/<name>.kubeconfig`` for every user.
Call these on the event loop the emulator runs on (they write its store directly).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from sandbox.kube.meta import format_time
from sandbox.kube.rbac import RBAC_GROUP
from sandbox.kube.seed import SYSTEM_NAMESPACES, namespace_names
from sandbox.kube.server import KubeServer
from shared import vocab

Obj = dict[str, Any]

#: The ClusterRole a user gets in their namespace, and the RoleBinding's name.
EDIT = "edit"
#: Where ``python -m sandbox up`` writes the users' kubeconfigs, under the state dir.
USERS_DIR = "users"


def sandbox_users(scenario: dict[str, Any]) -> list[str]:
    """The scenario's users: its namespaces, less the system ones and the controller's."""
    skip = {*SYSTEM_NAMESPACES, vocab.PRODUCT_NAME}
    return [n for n in namespace_names(scenario.get("namespaces")) if n not in skip]


def _server(target: Any) -> KubeServer:
    """The emulator of a ``SandboxContext`` (its ``kube`` handle), or the server itself."""
    if isinstance(target, KubeServer):
        return target
    server = getattr(target, "handles", {}).get("kube")
    if not isinstance(server, KubeServer):
        raise RuntimeError("no Kubernetes emulator in this sandbox (the kube component)")
    return server


def grant_edit(server: KubeServer, user: str) -> None:
    """Bind the ``edit`` ClusterRole to ``user`` in the namespace named after them
    (idempotent; the namespace must exist)."""
    store = server.store
    if store.peek("", "namespaces", "", user) is None:
        raise LookupError(f"no namespace {user!r} for sandbox user {user!r}")
    key = (RBAC_GROUP, "rolebindings", user, EDIT)
    if store.peek(*key) is not None:
        return
    binding: Obj = {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": EDIT,
            "namespace": user,
            "uid": str(uuid.uuid4()),
            "creationTimestamp": format_time(server.cluster.now()),
        },
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": EDIT},
        "subjects": [{"apiGroup": RBAC_GROUP, "kind": "User", "name": user}],
    }
    store.put(key, binding)


def user_kubeconfig(target: Any, user: str, path: Path) -> Path:
    """Write a kubeconfig for ``user`` (a token of theirs, their namespace as the
    context's) to ``path`` (mode 0600) after granting them ``edit`` there; returns
    ``path``. ``target``: a ``SandboxContext`` with the kube component, or a
    ``KubeServer``."""
    server = _server(target)
    grant_edit(server, user)
    token = server.mint_token(user)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(server.kubeconfig(token=token, user=user, namespace=user), encoding="utf-8")
    path.chmod(0o600)
    return path


def write_user_kubeconfigs(target: Any, scenario: dict[str, Any], directory: Path) -> list[Path]:
    """``<directory>/<user>.kubeconfig`` for every sandbox user of ``scenario``."""
    return [
        user_kubeconfig(target, user, directory / f"{user}.kubeconfig")
        for user in sandbox_users(scenario)
    ]
