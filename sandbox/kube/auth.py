"""Authentication: bearer tokens map to a user and groups.

The admin token belongs to ``kubernetes-admin`` in ``system:masters`` (the group RBAC
never restricts, as on a real cluster). ``mint`` issues a token for any identity, e.g.
a service account ``system:serviceaccount:<ns>:<name>``; every authenticated user also
gets ``system:authenticated``, as real authenticators add it.
"""

from __future__ import annotations

import secrets
import uuid

from sandbox.kube.admission_api import UserInfo
from sandbox.kube.errors import ApiError, error

ADMIN_USER = "kubernetes-admin"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
SA_PREFIX = "system:serviceaccount:"


def service_account_user(namespace: str, name: str) -> tuple[str, list[str]]:
    """Username and groups of a service account."""
    return (
        f"{SA_PREFIX}{namespace}:{name}",
        ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED],
    )


class TokenAuthenticator:
    """Token → user table."""

    def __init__(self) -> None:
        self._users: dict[str, UserInfo] = {}
        self.admin_token = self.mint(ADMIN_USER, [MASTERS])

    def mint(self, username: str, groups: list[str] | tuple[str, ...] = ()) -> str:
        """A new bearer token for ``username`` in ``groups`` (+ system:authenticated)."""
        token = secrets.token_urlsafe(24)
        all_groups = tuple(dict.fromkeys([*groups, AUTHENTICATED]))
        self._users[token] = UserInfo(username, str(uuid.uuid4()), all_groups)
        return token

    def authenticate(self, header: str | None) -> UserInfo:
        """The user of an ``Authorization: Bearer <token>`` header; 401 otherwise."""
        if header and header.lower().startswith("bearer "):
            user = self._users.get(header[7:].strip())
            if user is not None:
                return user
        raise unauthorized()


def unauthorized() -> ApiError:
    """401 Unauthorized."""
    return error(401, "Unauthorized", "Unauthorized")
