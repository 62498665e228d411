"""The endpoints controller: each Service with a selector gets an Endpoints object.

``endpoints_of`` (no side effects) lists the pods the selector matches that have an IP
and are not terminating or finished: Ready ones under ``addresses``, the others under
``notReadyAddresses`` (all under ``addresses`` with ``publishNotReadyAddresses``), each
with its ``targetRef``; the ports come from each Service port's ``targetPort`` (a
number, or the name of a container port of that pod — a pod without it is left out of
that port's subset), and pods with the same resolved ports share a subset, as the
kube-controller-manager's controller groups them.

The Endpoints the controller wrote go when their Service goes. An Endpoints object the
controller did not write (without its
``endpoints.kubernetes.io/last-change-trigger-time`` annotation) is kept as it is: the
sandbox's own components may still write the webhook's Endpoints by hand.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from sandbox.cluster.passes import Cache, Woken, snapshot
from sandbox.cluster.scheduling import TERMINAL_PHASES
from shared.clock import Clock, format_utc
from shared.errors import Conflict, KubeError, NotFound
from shared.gateway import Gateway
from shared.resources import Resource

log = logging.getLogger(__name__)
Obj = dict[str, Any]
ENDPOINTS = Resource("", "v1", "endpoints", "Endpoints")
#: The annotation the controller writes on every Endpoints object it manages.
TRIGGER_TIME = "endpoints.kubernetes.io/last-change-trigger-time"


def _ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _port(target: Any, pod: Obj) -> int | None:
    if isinstance(target, int) and not isinstance(target, bool):
        return target
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == target and port.get("protocol", "TCP") == "TCP":
                return int(port.get("containerPort") or 0) or None
    if isinstance(target, str) and target.isdigit():
        return int(target)
    return None


def _address(pod: Obj) -> Obj:
    meta = pod["metadata"]
    ref = {
        "kind": "Pod",
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta.get("uid"),
    }
    address: Obj = {"ip": pod["status"]["podIP"], "targetRef": ref}
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        address["nodeName"] = node
    return address


def selected(service: Obj, pods: list[Obj]) -> list[Obj]:
    """The live pods with an IP that the Service's selector matches."""
    spec, namespace = service.get("spec") or {}, service["metadata"].get("namespace")
    selector = spec.get("selector") or {}
    out = []
    for pod in pods:
        meta, status = pod["metadata"], pod.get("status") or {}
        labels = meta.get("labels") or {}
        if meta.get("namespace") != namespace or meta.get("deletionTimestamp"):
            continue
        if status.get("phase") in TERMINAL_PHASES or not status.get("podIP"):
            continue
        if all(labels.get(k) == v for k, v in selector.items()):
            out.append(pod)
    return sorted(out, key=lambda p: str(p["status"]["podIP"]))


def endpoints_of(service: Obj, pods: list[Obj]) -> list[Obj]:
    """The subsets of the Service's Endpoints."""
    spec = service.get("spec") or {}
    publish = bool(spec.get("publishNotReadyAddresses"))
    groups: dict[tuple[tuple[str, int, str], ...], Obj] = {}
    for pod in selected(service, pods):
        resolved: list[tuple[str, int, str]] = []
        for port in spec.get("ports") or []:
            number = _port(port.get("targetPort", port.get("port")), pod)
            if number is not None:
                name = str(port.get("name") or "")
                resolved.append((name, number, str(port.get("protocol", "TCP"))))
        if not resolved:
            continue
        subset = groups.setdefault(tuple(resolved), {"addresses": [], "notReadyAddresses": []})
        which = "addresses" if publish or _ready(pod) else "notReadyAddresses"
        subset[which].append(_address(pod))
    out = []
    for ports, subset in groups.items():
        entry: Obj = {k: v for k, v in subset.items() if v}
        entry["ports"] = [
            {**({"name": name} if name else {}), "port": number, "protocol": protocol}
            for name, number, protocol in ports
        ]
        out.append(entry)
    return out


class EndpointsController(Woken):
    """Keeps the Endpoints of every Service with a selector (see the module docstring)."""

    what = "endpoints controller"

    def __init__(
        self, gateway: Gateway, clock: Clock, services: Cache, pods: Cache, endpoints: Cache
    ) -> None:
        super().__init__(services, pods, endpoints)
        self._gateway, self._clock = gateway, clock
        self._services, self._pods, self._endpoints = services, pods, endpoints

    async def run_once(self) -> None:
        pods = snapshot(self._pods)
        for service in snapshot(self._services):
            if (service.get("spec") or {}).get("selector"):
                try:
                    await self._sync(service, pods)
                except (Conflict, NotFound):
                    continue  # the next pass sees the newer object
        for key, endpoints in list(self._endpoints.items.items()):
            annotations = endpoints["metadata"].get("annotations") or {}
            if TRIGGER_TIME in annotations and key not in self._services.items:
                await self._delete(endpoints)

    async def _delete(self, endpoints: Obj) -> None:
        """The Endpoints of a deleted Service go with it."""
        meta = endpoints["metadata"]
        with contextlib.suppress(NotFound, Conflict):
            await self._gateway.delete(ENDPOINTS, meta["name"], meta["namespace"])

    async def _sync(self, service: Obj, pods: list[Obj]) -> None:
        meta = service["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        subsets = endpoints_of(service, pods)
        current = self._endpoints.items.get(f"{namespace}/{name}")
        now = format_utc(self._clock.now())
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": dict(meta.get("labels") or {}),
                "annotations": {TRIGGER_TIME: now},
            },
        }
        if subsets:
            body["subsets"] = subsets
        if current is None:
            await self._gateway.create(ENDPOINTS, body, namespace)
            return
        annotations = current["metadata"].get("annotations") or {}
        if TRIGGER_TIME not in annotations:
            return  # written by hand: not this controller's
        if (current.get("subsets") or []) == subsets:
            return
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        try:
            await self._gateway.replace(ENDPOINTS, name, body, namespace)
        except KubeError as exc:
            log.debug("endpoints %s/%s not written: %s", namespace, name, exc)
            raise
