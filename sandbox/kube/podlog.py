"""``GET pods/<name>/log``: a container's output, as the kubelet serves it through the
API server.

The API server asks the node's kubelet; here the kubelet emulation registers a
``LogReader`` on the cluster (``Cluster.log_reader``). The container is the one named by
``container``, or the pod's only one (400 listing the choices otherwise); ``previous``
asks for the start before; ``tailLines`` and ``limitBytes`` cut the answer. A pod the
reader does not run (a simulated one: no process, no output) answers an empty body once
its container has started, as a kubelet with nothing logged does; before that, 400
``… is waiting to start: ContainerCreating``. ``follow`` (``kubectl logs -f``) streams
the output as it grows for as long as that start of the container runs (the same
``containerID``, state ``running``), then ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from sandbox.kube.cluster import Call, Cluster
from sandbox.kube.errors import bad_request, not_found

Obj = dict[str, Any]


def _flag(query: Mapping[str, str], key: str) -> bool:
    return query.get(key, "false").lower() in ("true", "1")


def _count(query: Mapping[str, str], key: str) -> int | None:
    raw = query.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise bad_request(f"{key}: invalid value {raw!r}: must be an integer") from None
    if value < 0 or (key == "limitBytes" and value == 0):
        raise bad_request(f"{key}: Invalid value: {value}: must be greater than 0")
    return value


def _container(pod: Obj, query: Mapping[str, str]) -> str:
    name = str(pod["metadata"]["name"])
    names = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or []]
    wanted = query.get("container", "")
    if not wanted:
        if len(names) == 1:
            return names[0]
        raise bad_request(
            f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]"
        )
    if wanted not in names:
        raise bad_request(f"container {wanted} is not valid for pod {name}")
    return wanted


def _simulated(pod: Obj, container: str, previous: bool) -> bytes:
    name = pod["metadata"]["name"]
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    status = next((s for s in statuses if s.get("name") == container), None)
    state = (status or {}).get("state") or {}
    if previous:
        if "terminated" not in ((status or {}).get("lastState") or {}):
            raise bad_request(
                f'previous terminated container "{container}" in pod "{name}" not found'
            )
        return b""
    if "running" in state or "terminated" in state:
        return b""
    reason = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
    raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')


#: Seconds between looks at a followed container's output.
FOLLOW_POLL_S = 0.2


def follows(call: Call) -> bool:
    """Whether the request asks to follow the output."""
    return _flag(call.query, "follow")


def _running_id(cluster: Cluster, call: Call, container: str) -> str | None:
    pod = cluster.store.get("", "pods", call.namespace, call.name)
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    status: Obj = next((s for s in statuses if s.get("name") == container), {})
    return (
        str(status.get("containerID") or "") if "running" in (status.get("state") or {}) else None
    )


async def stream(cluster: Cluster, call: Call) -> AsyncIterator[bytes]:
    """The body of a followed log: what there is, then what is added while that start
    of the container runs."""
    pod = cluster.store.get("", "pods", call.namespace, call.name) or {}
    container = _container(pod, call.query)
    running = _running_id(cluster, call, container)
    full = _output(cluster, call)
    yield _cut(full, call.query)
    if running is None or cluster.log_reader is None or _flag(call.query, "previous"):
        return
    sent, going = len(full), True
    while going:
        await asyncio.sleep(FOLLOW_POLL_S)
        going = _running_id(cluster, call, container) == running
        try:  # once more after it stopped: what it wrote last
            now = cluster.log_reader(call.namespace, call.name, container, False) or b""
        except LookupError:
            return
        if len(now) > sent:
            yield now[sent:]
            sent = len(now)


def read(cluster: Cluster, call: Call) -> bytes:
    """The answer body of ``GET pods/<name>/log``."""
    return _cut(_output(cluster, call), call.query)


def _output(cluster: Cluster, call: Call) -> bytes:
    """The whole output the request names (``ApiError`` if it names none)."""
    pod = cluster.store.get("", "pods", call.namespace, call.name)
    if pod is None:
        raise not_found("pods", "", call.name)
    container = _container(pod, call.query)
    previous = _flag(call.query, "previous")
    for key in ("tailLines", "limitBytes"):  # a malformed count is refused first
        _count(call.query, key)
    out = None
    if cluster.log_reader is not None:
        try:
            out = cluster.log_reader(call.namespace, call.name, container, previous)
        except LookupError as exc:
            raise bad_request(str(exc.args[0] if exc.args else exc)) from None
    return _simulated(pod, container, previous) if out is None else out


def _cut(out: bytes, query: Mapping[str, str]) -> bytes:
    """``tailLines`` then ``limitBytes`` applied."""
    tail, limit = _count(query, "tailLines"), _count(query, "limitBytes")
    if tail is not None:
        lines = out.splitlines(keepends=True)
        out = b"".join(lines[-tail:]) if tail else b""
    if limit is not None:
        out = out[:limit]
    return out
