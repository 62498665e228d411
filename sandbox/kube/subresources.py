"""The pod subresources a scheduler and a controller POST to: binding and eviction.

``pods/binding`` sets ``spec.nodeName`` (the only way to do so after creation) and
refuses gated, bound or terminating pods with 409 (facts §2.1). ``pods/eviction``
deletes the pod with the eviction's DeleteOptions (no PodDisruptionBudgets exist here).
Both answer 201 with a ``Success`` Status.
"""

from __future__ import annotations

from typing import Any

from sandbox.kube import meta as m
from sandbox.kube import pods
from sandbox.kube.cluster import Call, Cluster, options_body
from sandbox.kube.deletes import delete
from sandbox.kube.errors import bad_request, conflict, not_found, success_status

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
    pod = _pod(cluster, call)
    admitted = await cluster.admit(
        call,
        "CREATE",
        dict(body, apiVersion="v1", kind="Binding"),
        None,
        options_body("CreateOptions", call),
    )
    binding = admitted or body
    target = str((binding.get("target") or {}).get("name") or "")
    why = pods.binding_refusal(pod, target)
    if why:
        raise conflict("pods/binding", "", call.name, why)
    bound = pods.bind(pod, target, m.format_time(cluster.now()))
    for key, value in ((binding.get("metadata") or {}).get("annotations") or {}).items():
        bound["metadata"].setdefault("annotations", {})[key] = value
    if not call.dry_run:
        cluster.store.put(("", "pods", call.namespace, call.name), bound)
    return success_status(201)


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
