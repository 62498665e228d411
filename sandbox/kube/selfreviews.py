"""The reviews any authenticated user may ask about themself: ``kubectl auth can-i``
(SelfSubjectAccessReview), ``kubectl auth can-i --list`` (SelfSubjectRulesReview) and
``kubectl auth whoami`` (SelfSubjectReview).

They let a user or an operator check the RBAC the chart installs from the user's side
(docs/operator/threat-model.md): that a namespace editor cannot write a
GPUReservation, bind a pod or write a pod's status. The apiserver answers them from its
authorizer and stores nothing: the answer is the request with ``status`` filled in, code
201. Every authenticated user may create them (the ``system:basic-user`` ClusterRole),
and may read the discovery paths (``system:discovery``); those grants are
``BUILT_IN_RULES`` here, not objects in the store. Validation follows the apiserver's:
exactly one of ``resourceAttributes`` and ``nonResourceAttributes``, and a body that is
not the kind's shape is a 400. Sources: kubernetes ``pkg/registry/authorization``,
``pkg/apis/authorization/validation``, ``plugin/pkg/auth/authorizer/rbac/bootstrappolicy``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sandbox.kube.admission_api import UserInfo
from sandbox.kube.auth import MASTERS
from sandbox.kube.errors import bad_request, check, invalid_value
from sandbox.kube.rbac import Authorizer, Request, rule_allows

Obj = dict[str, Any]
AUTHORIZATION = "authorization.k8s.io"
AUTHENTICATION = "authentication.k8s.io"
_REVIEWS = ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]
_DISCOVERY_PATHS = ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez"]
_DISCOVERY_PATHS += ["/openapi", "/openapi/*", "/readyz", "/version", "/version/"]
#: What every authenticated user is granted by the bootstrap ClusterRoles.
BUILT_IN_RULES: list[Obj] = [
    {"verbs": ["create"], "apiGroups": [AUTHORIZATION], "resources": _REVIEWS},
    {"verbs": ["create"], "apiGroups": [AUTHENTICATION], "resources": ["selfsubjectreviews"]},
    {"verbs": ["get"], "nonResourceURLs": _DISCOVERY_PATHS},
]
_RESOURCE_FIELDS = ("namespace", "verb", "group", "version", "resource", "subresource", "name")


def _access(body: Obj, user: UserInfo, authz: Authorizer) -> Obj:
    spec = _object(body, "spec", "SelfSubjectAccessReview")
    res = _object(spec, "resourceAttributes", "SelfSubjectAccessReview", optional=True)
    non = _object(spec, "nonResourceAttributes", "SelfSubjectAccessReview", optional=True)
    errors = []
    if res is not None and non is not None:
        detail = "cannot be specified in combination with resourceAttributes"
        errors.append(invalid_value("spec.nonResourceAttributes", non, detail))
    if res is None and non is None:
        detail = "exactly one of nonResourceAttributes or resourceAttributes must be specified"
        errors.append(invalid_value("spec.resourceAttributes", None, detail))
    check("SelfSubjectAccessReview", AUTHORIZATION, "", errors)
    if res is not None:
        fields = {k: _text(res, k, "ResourceAttributes") for k in _RESOURCE_FIELDS}
        asked = Request(
            user,
            fields["verb"],
            fields["group"],
            fields["resource"],
            fields["subresource"],
            fields["namespace"],
            fields["name"],
        )
        allowed = authz.allowed(asked) or any(rule_allows(r, asked) for r in BUILT_IN_RULES)
    else:
        assert non is not None
        path, verb = (
            _text(non, "path", "NonResourceAttributes"),
            _text(non, "verb", "NonResourceAttributes"),
        )
        rules = BUILT_IN_RULES + authz.rules_of(user, "")
        allowed = MASTERS in user.groups or any(_path_allows(r, verb, path) for r in rules)
    return {**body, "status": {"allowed": allowed}}


def _path_allows(rule: Obj, verb: str, path: str) -> bool:
    """Whether a rule's ``nonResourceURLs`` (exact, or a prefix ending in ``*``) and
    verbs cover ``verb`` on ``path``."""
    verbs = rule.get("verbs") or []
    if "*" not in verbs and verb not in verbs:
        return False
    for url in rule.get("nonResourceURLs") or []:
        if url == path or (url.endswith("*") and path.startswith(url[:-1])):
            return True
    return False


def _rules(body: Obj, user: UserInfo, authz: Authorizer) -> Obj:
    spec = _object(body, "spec", "SelfSubjectRulesReview")
    namespace = _text(spec, "namespace", "SelfSubjectRulesReviewSpec")
    if MASTERS in user.groups:
        bound = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]
        bound.append({"verbs": ["*"], "nonResourceURLs": ["*"]})
    else:
        bound = BUILT_IN_RULES + authz.rules_of(user, namespace)
    resource_rules, path_rules = [], []
    for rule in bound:
        if rule.get("nonResourceURLs"):
            path_rules.append({k: rule.get(k) or [] for k in ("verbs", "nonResourceURLs")})
        else:
            keys = ("verbs", "apiGroups", "resources", "resourceNames")
            resource_rules.append({k: rule[k] for k in keys if rule.get(k)})
    status = {"resourceRules": resource_rules, "nonResourceRules": path_rules}
    return {**body, "status": {**status, "incomplete": False}}


def _whoami(body: Obj, user: UserInfo, authz: Authorizer) -> Obj:
    info: Obj = {"username": user.username, "groups": list(user.groups)}
    if user.uid:
        info["uid"] = user.uid
    if user.extra:
        info["extra"] = user.extra
    return {**body, "status": {"userInfo": info}}


Answer = Callable[[Obj, UserInfo, Authorizer], Obj]
#: (group, version, plural) → (kind, how it is answered).
REVIEWS: dict[tuple[str, str, str], tuple[str, Answer]] = {
    (AUTHORIZATION, "v1", "selfsubjectaccessreviews"): ("SelfSubjectAccessReview", _access),
    (AUTHORIZATION, "v1", "selfsubjectrulesreviews"): ("SelfSubjectRulesReview", _rules),
    (AUTHENTICATION, "v1", "selfsubjectreviews"): ("SelfSubjectReview", _whoami),
}


def route(path: str) -> tuple[str, str, str] | None:
    """The review ``path`` names (``/apis/<group>/v1/<plural>``), or None."""
    parts = [p for p in path.split("/") if p]
    key = tuple(parts[1:])
    if len(parts) == 4 and parts[0] == "apis" and key in REVIEWS:
        return (parts[1], parts[2], parts[3])
    return None


def answer(review: tuple[str, str, str], body: Any, user: UserInfo, authz: Authorizer) -> Obj:
    """The review of ``body`` for the caller (raises the apiserver's 400 or 422)."""
    kind, answered = REVIEWS[review]
    group, version, _ = review
    if not isinstance(body, dict):
        raise bad_request(f"{kind} in version {version!r} cannot be handled as a {kind}")
    if body.get("kind", kind) != kind:
        raise bad_request(f"{kind} in version {version!r} cannot be handled as a {kind}")
    shaped: Obj = {**body, "kind": kind, "apiVersion": f"{group}/{version}"}
    meta = shaped.get("metadata")
    shaped["metadata"] = {"creationTimestamp": None, **(meta if isinstance(meta, dict) else {})}
    return answered(shaped, user, authz)


def _object(parent: Obj, key: str, kind: str, optional: bool = False) -> Any:
    value = parent.get(key)
    if value is None:
        return None if optional else {}
    if not isinstance(value, dict):
        raise bad_request(f"{kind}: json: cannot unmarshal {_json_type(value)} into {key}")
    return value


def _text(parent: Obj, key: str, kind: str) -> str:
    value = parent.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise bad_request(
            f"json: cannot unmarshal {_json_type(value)} into Go struct field {kind}.{key} "
            "of type string"
        )
    return value


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string"


def resource_list(group: str, version: str) -> Obj | None:
    """The discovery document of a review group (``/apis/<group>/v1``), or None."""
    entries = [
        {"name": plural, "singularName": "", "namespaced": False, "kind": kind, "verbs": ["create"]}
        for (g, v, plural), (kind, _) in REVIEWS.items()
        if (g, v) == (group, version)
    ]
    if not entries:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}",
        "resources": entries,
    }


#: Group → versions served for the reviews (discovery).
GROUPS = {AUTHORIZATION: ["v1"], AUTHENTICATION: ["v1"]}
