"""The pod subresources a scheduler and a controller POST to: binding and eviction.

``pods/binding`` sets ``spec.nodeName`` (the only way to do so after creation) and
refuses gated, bound or terminating pods with 409 (facts §2.1), deciding on the pod as
stored once admission has answered (so two bindings never both succeed), and checks the
Binding's uid and resourceVersion preconditions. ``pods/eviction``
deletes the pod with the eviction's DeleteOptions (no PodDisruptionBudgets exist here).
Both answer 201 with a ``Success`` Status.
"""

from __future__ import annotations

from typing import Any

from sandbox.kube import meta as m
from sandbox.kube import pods
from sandbox.kube.cluster import Call, Cluster, options_body
from sandbox.kube.deletes import delete
from sandbox.kube.errors import MODIFIED_MSG, bad_request, conflict, not_found, success_status

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
