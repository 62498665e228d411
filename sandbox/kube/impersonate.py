"""Impersonation: ``kubectl --as USER [--as-group G]… [--as-uid U]``.

An operator checks what a service account or a user may do by acting as them
(``kubectl auth can-i … --as system:serviceaccount:<ns>:<name>``). As kube-apiserver's
impersonation filter does: the caller must be allowed ``impersonate`` on each thing
asked for — ``users`` (by name), ``serviceaccounts`` (in the account's namespace),
``groups``, ``uids``, and ``userextras/<key>`` in ``authentication.k8s.io`` — or the
request is the apiserver's 403 naming the first refusal; groups, a uid or extras
without a user are a 500 (``requested … without impersonating a user``). The request
then runs as the user asked for: a service account without groups asked gets its fixed
groups, and every user but ``system:anonymous`` gets ``system:authenticated`` unless
``system:authenticated`` or ``system:unauthenticated`` was asked for. Source:
kubernetes ``staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation.go``.
"""

from __future__ import annotations

from collections.abc import Iterable

from sandbox.kube.admission_api import UserInfo
from sandbox.kube.auth import AUTHENTICATED, SA_PREFIX, service_account_user
from sandbox.kube.errors import error
from sandbox.kube.rbac import Authorizer, Request, forbidden

_USER = "impersonate-user"
_GROUP = "impersonate-group"
_UID = "impersonate-uid"
_EXTRA = "impersonate-extra-"
_UNAUTHENTICATED = "system:unauthenticated"
_ANONYMOUS = "system:anonymous"


def acting_as(
    headers: Iterable[tuple[bytes, bytes]], caller: UserInfo, authz: Authorizer
) -> UserInfo:
    """The user a request runs as: ``caller``, or whom its ``Impersonate-*`` headers
    name once ``caller`` may impersonate them (raises the apiserver's 403 or 500).
    ``headers`` as an ASGI scope has them: names in lower case."""
    asked = [(n, v) for n, v in headers if n.startswith(b"impersonate-")]
    if not asked:  # every request passes here: nothing more unless it asks
        return caller
    username, uid = "", ""
    groups: list[str] = []
    extra: dict[str, list[str]] = {}
    for raw_name, raw_value in asked:
        name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
        if name == _USER:
            username = value
        elif name == _GROUP:
            groups.append(value)
        elif name == _UID:
            uid = value
        elif name.startswith(_EXTRA):
            extra.setdefault(name[len(_EXTRA) :], []).append(value)
    if not username:
        raise error(500, "InternalError", "requested impersonation without impersonating a user")
    checks = [_user_check(caller, username)]
    checks += [Request(caller, "impersonate", "", "groups", name=g) for g in groups]
    if uid:
        checks.append(Request(caller, "impersonate", "", "uids", name=uid))
    for key, values in extra.items():
        group = "authentication.k8s.io"
        checks += [Request(caller, "impersonate", group, "userextras", key, name=v) for v in values]
    for check in checks:
        if not authz.allowed(check):
            raise forbidden(check)
    if username.startswith(SA_PREFIX) and not groups:
        namespace, _, account = username[len(SA_PREFIX) :].partition(":")
        groups = list(service_account_user(namespace, account)[1])
    if username != _ANONYMOUS and not {AUTHENTICATED, _UNAUTHENTICATED} & set(groups):
        groups.append(AUTHENTICATED)
    return UserInfo(username, uid, tuple(dict.fromkeys(groups)), extra)


def _user_check(caller: UserInfo, username: str) -> Request:
    """What impersonating ``username`` needs: a service account's own name in its
    namespace, any other user's name."""
    if username.startswith(SA_PREFIX):
        namespace, _, account = username[len(SA_PREFIX) :].partition(":")
        if account:
            return Request(caller, "impersonate", "", "serviceaccounts", "", namespace, account)
    return Request(caller, "impersonate", "", "users", name=username)
