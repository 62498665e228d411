"""Subresources with their own handling: the pod's binding and eviction (what a
scheduler and a controller POST), and the Scale of Deployments and ReplicaSets.

``pods/binding`` sets ``spec.nodeName`` (the only way to do so after creation) and
refuses gated, bound or terminating pods with 409 (facts §2.1), deciding on the pod as
stored once admission has answered (so two bindings never both succeed), and checks the
Binding's uid and resourceVersion preconditions. ``pods/eviction``
deletes the pod with the eviction's DeleteOptions (no PodDisruptionBudgets exist here).
Both answer 201 with a ``Success`` Status. ``scale`` shows and writes the autoscaling/v1
``Scale`` view (``workloads.scale_of``): a PATCH or PUT changes ``spec.replicas`` only.
"""

from __future__ import annotations

from typing import Any

from sandbox.kube import meta as m
from sandbox.kube import pods, workloads
from sandbox.kube.clone import clone
from sandbox.kube.cluster import Call, Cluster, options_body
from sandbox.kube.deletes import delete
from sandbox.kube.errors import (
    MODIFIED_MSG,
    bad_request,
    conflict,
    invalid,
    invalid_value,
    not_found,
    stale,
    success_status,
)
from sandbox.kube.writes import UPDATE_ATTEMPTS, Moved, apply_update

Obj = dict[str, Any]


def _pod(cluster: Cluster, call: Call) -> Obj:
    pod = cluster.store.get("", "pods", call.namespace, call.name)
    if pod is None:
        raise not_found("pods", "", call.name)
    return pod


async def bind(cluster: Cluster, call: Call, body: Any) -> Obj:
    """POST pods/<name>/binding."""
    if not isinstance(body, dict) or body.get("kind", "Binding") != "Binding":
        raise bad_request("the body must be a Binding")
    binding_name = (body.get("metadata") or {}).get("name") or call.name
    if binding_name != call.name:
        raise bad_request(
            f"the name of the object ({binding_name}) does not match the name on the URL "
            f"({call.name})"
        )
    _pod(cluster, call)
    admitted = await cluster.admit(
        call,
        "CREATE",
        dict(body, apiVersion="v1", kind="Binding"),
        None,
        options_body("CreateOptions", call),
    )
    binding = admitted or body
    target = str((binding.get("target") or {}).get("name") or "")
    # The pod as it is now, not as it was before admission: a slow webhook must not let
    # two bindings both see it unbound (the apiserver decides inside one guaranteed
    # update of the stored pod).
    pod = _pod(cluster, call)
    _check_preconditions(call, pod, binding)
    why = pods.binding_refusal(pod, target)
    if why:
        raise conflict("pods/binding", "", call.name, why)
    bound = pods.bind(pod, target, m.format_time(cluster.now()))
    for key, value in ((binding.get("metadata") or {}).get("annotations") or {}).items():
        bound["metadata"].setdefault("annotations", {})[key] = value
    if not call.dry_run:
        cluster.store.put(("", "pods", call.namespace, call.name), bound)
    return success_status(201)


def _check_preconditions(call: Call, pod: Obj, binding: Obj) -> None:
    """The binding's ``metadata.uid`` and ``resourceVersion``, when set, must be the
    stored pod's (409 otherwise, as ``assignPod``'s storage preconditions)."""
    meta, stored = binding.get("metadata") or {}, pod["metadata"]
    uid, rv = meta.get("uid"), meta.get("resourceVersion")
    if uid and uid != stored.get("uid"):
        raise conflict(
            "pods",
            "",
            call.name,
            f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
            f"{stored.get('uid')}",
        )
    if rv and rv != stored.get("resourceVersion"):
        raise conflict(
            "pods",
            "",
            call.name,
            MODIFIED_MSG,
        )


def scale_view(cluster: Cluster, call: Call) -> Obj:
    """The Scale a PATCH of ``/scale`` applies to."""
    return get_scale(cluster, call)


def get_scale(cluster: Cluster, call: Call) -> Obj:
    """GET deployments|replicasets/<name>/scale: the autoscaling/v1 Scale."""
    obj = cluster.store.peek(*call.key)
    if obj is None:
        raise not_found(call.rtype.plural, call.rtype.group, call.name)
    return workloads.scale_of(obj)


async def write_scale(cluster: Cluster, call: Call, scale: Any) -> Obj:
    """PATCH or PUT of a Scale (what ``kubectl scale`` sends; ``scale`` is the written
    Scale, a patch already applied to ``scale_view``): only ``spec.replicas`` reaches
    the object, with the Scale's resourceVersion as precondition; the answer is the
    Scale after the write. Decided again on the stored object when it changed while the
    write was admitted."""
    for _ in range(UPDATE_ATTEMPTS - 1):
        try:
            return await _write_scale(cluster, call, scale)
        except Moved:
            continue
    return await _write_scale(cluster, call, scale)


async def _write_scale(cluster: Cluster, call: Call, scale: Any) -> Obj:
    old = cluster.store.peek(*call.key)
    if old is None:
        raise not_found(call.rtype.plural, call.rtype.group, call.name)
    if not isinstance(scale, dict) or scale.get("kind", "Scale") != "Scale":
        raise bad_request("the body must be an autoscaling/v1 Scale")
    meta = scale.get("metadata") or {}
    if meta.get("name", call.name) != call.name:
        raise bad_request(
            f"the name of the object ({meta.get('name')}) does not match the name on the URL "
            f"({call.name})"
        )
    rv = meta.get("resourceVersion")
    if rv and rv != old["metadata"]["resourceVersion"]:
        raise stale(call.rtype.plural, call.rtype.group, call.name)
    replicas = (scale.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise invalid(
            "Scale",
            "autoscaling",
            call.name,
            [invalid_value("spec.replicas", replicas, "must be greater than or equal to 0")],
        )
    new = clone(old)
    new.setdefault("spec", {})["replicas"] = replicas
    await apply_update(cluster, call, new, old, {})
    return get_scale(cluster, call)


async def evict(cluster: Cluster, call: Call, body: Any) -> Obj:
    """POST pods/<name>/eviction: delete the pod with the eviction's options."""
    if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction":
        raise bad_request("the body must be an Eviction")
    _pod(cluster, call)
    await cluster.admit(call, "CREATE", dict(body), None, options_body("CreateOptions", call))
    main = Call(
        call.rtype,
        call.strategy,
        call.user,
        call.namespace,
        call.name,
        "",
        call.query,
        call.warnings,
    )
    await delete(cluster, main, body.get("deleteOptions") or {})
    return success_status(201)
