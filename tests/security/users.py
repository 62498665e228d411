"""Ordinary sandbox users with their own kubeconfig: a token of their own (not admin)
and, in their namespace, the rights of a namespace editor on a real cluster.

Kept apart on purpose: the emulator is to grow its own helper for this
(``sandbox.users``); swapping it in means replacing ``user_kubeconfig`` only.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from sandbox.kube.server import KubeServer

#: The ClusterRole bound in each user's namespace; the emulator's seed may define it.
EDIT_ROLE = "edit"
_RBAC = "rbac.authorization.k8s.io"
_WRITE = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_READ = ["get", "list", "watch"]

#: The usual rules of kube's aggregated ``edit`` role for what these tests touch:
#: workloads and pods (with their user-facing subresources) written, Events read.
EDIT_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [""],
        "resources": [
            "pods",
            "pods/log",
            "pods/exec",
            "pods/attach",
            "pods/portforward",
            "pods/ephemeralcontainers",
            "configmaps",
            "secrets",
            "services",
            "persistentvolumeclaims",
        ],
        "verbs": _WRITE,
    },
    {"apiGroups": [""], "resources": ["events", "pods/status", "namespaces"], "verbs": _READ},
    {
        "apiGroups": ["apps"],
        "resources": ["deployments", "deployments/scale", "replicasets", "replicasets/scale"],
        "verbs": _WRITE,
    },
    {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": _WRITE},
]


def user_kubeconfig(server: KubeServer, admin: Path, user: str, path: Path) -> Path:
    """Write ``path``: a kubeconfig authenticating as ``user`` (group
    ``system:authenticated`` only), bound to ``edit`` in namespace ``user``. ``admin``
    is the admin kubeconfig that installs the ClusterRole (when missing) and the
    RoleBinding."""
    role = {"apiVersion": f"{_RBAC}/v1", "kind": "ClusterRole", "metadata": {"name": EDIT_ROLE}}
    binding = {
        "apiVersion": f"{_RBAC}/v1",
        "kind": "RoleBinding",
        "metadata": {"name": f"{user}-{EDIT_ROLE}", "namespace": user},
        "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": EDIT_ROLE},
        "subjects": [{"apiGroup": _RBAC, "kind": "User", "name": user}],
    }
    if _run(admin, "get", "clusterrole", EDIT_ROLE).returncode != 0:
        _apply(admin, {**role, "rules": EDIT_RULES})
    _apply(admin, binding)
    path.write_text(server.kubeconfig(token=server.mint_token(user), user=user), "utf-8")
    path.chmod(0o600)
    return path


def _apply(admin: Path, obj: dict[str, Any]) -> None:
    done = _run(admin, "apply", "-f", "-", stdin=json.dumps(obj))
    assert done.returncode == 0, done.stderr


def _run(admin: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(admin), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
