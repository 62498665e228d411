"""DELETE: options, preconditions, graceful pod deletion, finalizers (facts §3.7),
propagation policies (Orphan and Foreground add the ``orphan`` or
``foregroundDeletion`` finalizer the garbage collector acts on; Background, the default
except for batch/v1 Jobs, removes the object at once).

Options come from the body when there is one, else from the query. A precondition
mismatch is a 409. Pods get a grace period (0 when unbound or finished); an object with
finalizers or remaining grace is marked (``deletionTimestamp``) and stays. Pods and
namespaces answer with the object, other kinds with a ``Success`` Status. Deleting a
namespace removes its contents; deleting a CRD removes its custom objects.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from sandbox.kube import meta as m
from sandbox.kube import pods
from sandbox.kube.cluster import Call, Cluster, options_body, present
from sandbox.kube.errors import (
    bad_request,
    conflict,
    invalid,
    not_found,
    not_supported,
    success_status,
)

Obj = dict[str, Any]

_RETURNS_OBJECT = frozenset({("", "pods"), ("", "namespaces")})


def read_options(call: Call, body: Any) -> Obj:
    """DeleteOptions from the body (which wins) or from the query string."""
    if isinstance(body, dict) and body:
        return body
    if body not in (None, {}, b""):
        raise bad_request("DeleteOptions must be an object")
    options: Obj = {}
    if "gracePeriodSeconds" in call.query:
        try:
            options["gracePeriodSeconds"] = int(call.query["gracePeriodSeconds"])
        except ValueError as exc:
            raise bad_request("gracePeriodSeconds must be an integer") from exc
    if "propagationPolicy" in call.query:
        options["propagationPolicy"] = call.query["propagationPolicy"]
    if call.dry_run:
        options["dryRun"] = ["All"]
    return options


def _as_options_say(call: Call, options: Obj) -> Call:
    """The call with the options' ``dryRun`` (a body's replaces the query's)."""
    query = {k: v for k, v in call.query.items() if k != "dryRun"}
    if "All" in (options.get("dryRun") or []):
        query["dryRun"] = "All"
    return dataclasses.replace(call, query=query)


def _check_preconditions(call: Call, old: Obj, options: Obj) -> None:
    pre = options.get("preconditions") or {}
    meta = old["metadata"]
    if pre.get("uid") and pre["uid"] != meta.get("uid"):
        raise conflict(
            call.rtype.plural,
            call.rtype.group,
            call.name,
            f"the UID in the precondition ({pre['uid']}) does not match the UID in record "
            f"({meta.get('uid')}). The object might have been deleted and then recreated",
        )
    rv = pre.get("resourceVersion")
    if rv and rv != meta.get("resourceVersion"):
        raise conflict(
            call.rtype.plural,
            call.rtype.group,
            call.name,
            f"the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion "
            f"in record ({meta.get('resourceVersion')}). The object might have been modified",
        )


async def delete(cluster: Cluster, call: Call, body: Any) -> Obj:
    """DELETE one object; returns the response body."""
    old = cluster.store.get(*call.key)
    if old is None:
        raise not_found(call.rtype.plural, call.rtype.group, call.name)
    options = read_options(call, body)
    call = _as_options_say(call, options)
    _check_preconditions(call, old, options)
    extra = {k: v for k, v in options.items() if k not in ("apiVersion", "kind")}
    await cluster.admit(
        call, "DELETE", None, present(call, old), options_body("DeleteOptions", call, extra)
    )
    finalizer = _gc_finalizer(call, options)
    if finalizer and finalizer not in (old["metadata"].get("finalizers") or []):
        old["metadata"]["finalizers"] = [*(old["metadata"].get("finalizers") or []), finalizer]
    is_pod = call.rtype.store_key == ("", "pods")
    grace = pods.delete_grace(old, options.get("gracePeriodSeconds")) if is_pod else 0
    if old["metadata"].get("finalizers") or grace > 0:
        return _mark_deleting(cluster, call, old, grace)
    if call.dry_run:
        return _answer(call, old)
    return remove(cluster, call, old)


#: The finalizers that hand an object's dependents to the garbage collector.
ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"
POLICIES = ("Orphan", "Background", "Foreground")
#: The warning a batch/v1 Job delete gets without a propagation policy.
JOB_ORPHAN_WARNING = (
    "child pods are preserved by default when jobs are deleted; set "
    "propagationPolicy=Background to remove them or set propagationPolicy=Orphan to "
    "suppress this warning"
)


def _gc_finalizer(call: Call, options: Obj) -> str:
    """The finalizer the propagation policy asks for (``orphan``, ``foregroundDeletion``)
    or ``""`` (Background: the object goes now, the garbage collector deletes its
    dependents after). Without a policy every kind is Background except batch/v1 Jobs,
    which orphan their pods (with a warning), for compatibility, as the apiserver does."""
    policy = options.get("propagationPolicy")
    legacy = options.get("orphanDependents")
    if policy is not None and policy not in POLICIES:
        raise invalid(
            "DeleteOptions",
            "meta.k8s.io",
            "",
            [not_supported("propagationPolicy", policy, list(POLICIES))],
        )
    if policy is None and legacy is not None:
        policy = "Orphan" if legacy else "Background"
    if policy is None and call.rtype.store_key == ("batch", "jobs"):
        call.warnings.append(JOB_ORPHAN_WARNING)
        policy = "Orphan"
    return {"Orphan": ORPHAN, "Foreground": FOREGROUND}.get(policy or "", "")


def _mark_deleting(cluster: Cluster, call: Call, old: Obj, grace: int) -> Obj:
    meta = old["metadata"]
    now = cluster.now()
    deadline = m.format_time(now + timedelta(seconds=grace))
    current = meta.get("deletionGracePeriodSeconds")
    if meta.get("deletionTimestamp") and current is not None and current <= grace:
        return present(call, old)
    if grace == 0 and not meta.get("finalizers"):
        return remove(cluster, call, old)
    meta["deletionTimestamp"] = (
        deadline
        if not meta.get("deletionTimestamp") or grace < (current or 0)
        else meta["deletionTimestamp"]
    )
    meta["deletionGracePeriodSeconds"] = grace
    if grace > 0 and "generation" in meta:
        meta["generation"] = int(meta["generation"]) + 1
    if call.dry_run:
        return present(call, old)
    return present(call, cluster.store.put(call.key, old))


def remove(cluster: Cluster, call: Call, old: Obj) -> Obj:
    """Remove the object now (with the side effects of namespaces and CRDs)."""
    store_key = call.rtype.store_key
    if store_key == ("", "namespaces"):
        _empty_namespace(cluster, call.name)
    final = cluster.store.remove(call.key) or old
    if store_key == ("apiextensions.k8s.io", "customresourcedefinitions"):
        cluster.unserve_crd(old)
    return _answer(call, final)


def _answer(call: Call, final: Obj) -> Obj:
    if call.rtype.store_key in _RETURNS_OBJECT:
        shown = present(call, final)
        if call.rtype.store_key == ("", "namespaces"):
            shown["status"] = {"phase": "Terminating"}
        return shown
    details = {
        "name": call.name,
        "group": call.rtype.group,
        "kind": call.rtype.plural,
        "uid": final["metadata"].get("uid"),
    }
    if not call.rtype.group:
        del details["group"]
    return success_status(200, details)


def _empty_namespace(cluster: Cluster, namespace: str) -> None:
    for key in cluster.store.namespaces_in_use(namespace):
        cluster.store.remove(key)
