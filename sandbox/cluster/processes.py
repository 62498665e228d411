"""The process runtime: pods of our own image run as local processes.

A pod whose every container's image repository (the tag ignored) is in
``LOCAL_IMAGES`` runs from this checkout, one process per container, built from the
spec the way a kubelet builds a container:

- argv: ``command`` (else the image's ``CMD``) then ``args``, ``$(VAR)`` expanded;
  ``python``/``python3`` is this interpreter; cwd and PYTHONPATH the checkout;
- environment: the image's ``ENV``, ``HOSTNAME`` = the pod's name, the spec's
  ``envFrom``/``env`` (``sandbox.cluster.podenv``; a missing reference keeps the
  container waiting in ``CreateContainerConfigError`` until it appears), the sandbox
  clock's variables, and three substitutions: ``KUBECONFIG`` (the service account's
  token and the API server's CA, when ``automountServiceAccountToken`` is not false),
  ``SANDBOX_POD_IP`` (read by ``podpath/sitecustomize.py``: a wildcard bind lands on
  the pod IP) and ``TMPDIR`` (when ``/tmp`` is a volume);
- volumes (``secret``, ``configMap``, ``emptyDir``) are directories under
  ``<state-dir>/pods/<ns>_<name>_<uid>/volumes/``; env values and arguments naming a
  path under a ``mountPath`` are rewritten onto them (``sandbox.cluster.mounts``);
  Secret and ConfigMap volumes follow their object (each change is written at once);
- output (stdout and stderr) goes to ``logs/<container>/<n>.log`` per start (what
  ``kubectl logs`` serves, ``--previous`` the one before);
- probes (``sandbox.cluster.probes``) set readiness, and a failed liveness probe
  restarts the container; an exit is restarted per ``restartPolicy`` with the kubelet's
  back-off (``sandbox.cluster.backoff``); the status is written as a kubelet writes it
  (``sandbox.cluster.localstatus``).

``ProcessRuntime`` is ``ctx.handles["processes"]``: ``of``, ``running``, ``wait_ready``.
How a container's argv, environment and volumes are built is ``sandbox.cluster.podrun``;
this module runs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import IO, Any

from sandbox.cluster import events, pdeath
from sandbox.cluster.backoff import advanced, restart_wait
from sandbox.cluster.localstatus import (
    CONFIG_ERROR,
    CONTAINER_CREATING,
    CRASH_LOOP,
    pod_status,
    terminated,
)
from sandbox.cluster.mounts import VolumeError
from sandbox.cluster.passes import Cache
from sandbox.cluster.podenv import SECRET, ConfigError
from sandbox.cluster.podrun import (
    LOCAL_IMAGES,
    ROOT,
    START_ERROR,
    START_ERROR_CODE,
    ContainerRun,
    Credentials,
    LocalProcess,
    PodRun,
    argv,
    containers_of,
    environment,
    grace,
    is_local,
    layout,
    message,
    probe_of,
    service_account,
)
from sandbox.cluster.probes import Counter, check
from sandbox.cluster.secretdata import decoded
from sandbox.runner import clock_env
from shared.clock import Clock, SystemClock, format_utc
from shared.errors import KubeError, NotFound
from shared.gateway import Gateway
from shared.resources import PODS

__all__ = ["LOCAL_IMAGES", "Credentials", "LocalProcess", "ProcessRuntime", "is_local"]

log = logging.getLogger(__name__)
Obj = dict[str, Any]
#: Wall seconds between retries of a pod that cannot start (volumes, env).
RETRY_S = 1.0
#: Wall seconds ``stop`` gives every process after SIGTERM.
STOP_GRACE_S = 5.0

KUBELET = "kubelet"


class ProcessRuntime:
    """Runs and watches the processes of local pods; see the module docstring."""

    def __init__(
        self,
        gateway: Gateway,
        clock: Clock,
        state_dir: Path,
        pods: Cache,
        secrets: Cache,
        configmaps: Cache,
        credentials: Credentials | None = None,
    ) -> None:
        self._gateway, self._clock = gateway, clock
        #: Probes and termination grace time real processes: a process's start-up and
        #: answers take wall seconds whatever the sandbox clock's pace (at 60x a 10 s
        #: initial delay would be a sixth of a wall second, less than Python needs to
        #: import the webhook under load).
        self._wall = SystemClock()
        self.root = state_dir / "pods"
        self._pods, self._secrets, self._configmaps = pods, secrets, configmaps
        self._credentials = credentials
        self.runs: dict[str, PodRun] = {}
        #: Set at the next Secret or ConfigMap change (or a pod's stop), then replaced by
        #: a fresh one: whoever took it before trying something sees any change since.
        self._changed = asyncio.Event()
        for source in (secrets, configmaps):
            source.listeners.append(self._source_changed)
        self._refresher: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()

    # --- what tests and the sandbox use ----------------------------------------------

    def of(self, namespace: str, name: str, container: str | None = None) -> LocalProcess | None:
        """The current process of a pod's container (the first when not named)."""
        for run in self.runs.values():
            if run.namespace == namespace and run.name == name and not run.terminating:
                for c in run.containers:
                    if container in (None, c.name):
                        return c.process
        return None

    def running(self) -> list[LocalProcess]:
        """Every process alive now."""
        return [
            c.process
            for run in self.runs.values()
            for c in run.containers
            if c.process is not None and c.process.alive
        ]

    async def wait_ready(
        self, namespace: str, selector: dict[str, str], count: int, timeout_s: float
    ) -> list[Obj]:
        """Wait (wall seconds) until ``count`` pods matching ``selector`` are Ready."""
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    ready = self._ready_pods(namespace, selector)
                    if len(ready) >= count:
                        return ready
                    await asyncio.sleep(0.05)
        except TimeoutError:
            have = len(self._ready_pods(namespace, selector))
            raise TimeoutError(
                f"{have} of {count} pods {selector} in {namespace} Ready after {timeout_s}s"
            ) from None

    def _ready_pods(self, namespace: str, selector: dict[str, str]) -> list[Obj]:
        out = []
        for pod in list(self._pods.items.values()):
            meta = pod["metadata"]
            labels = meta.get("labels") or {}
            if meta.get("namespace") != namespace or meta.get("deletionTimestamp"):
                continue
            if any(labels.get(k) != v for k, v in selector.items()):
                continue
            conditions = (pod.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                out.append(pod)
        return out

    def logs(self, namespace: str, name: str, container: str, previous: bool) -> bytes | None:
        """The output of the container's current start (or the one before), as the
        kubelet picks it from the container's status; None for a pod it does not run.
        ``LookupError`` with the kubelet's message when there is none."""
        run = next(
            (r for r in self.runs.values() if (r.namespace, r.name) == (namespace, name)), None
        )
        c = next((c for c in run.containers if c.name == container), None) if run else None
        if run is None or c is None:
            return None
        crash_loop = (c.state.get("waiting") or {}).get("reason") == CRASH_LOOP
        if previous:
            if "terminated" not in c.last_state and not crash_loop:
                raise LookupError(
                    f'previous terminated container "{container}" in pod "{name}" not found'
                )
            index = c.restart_count if crash_loop else c.restart_count - 1
        else:
            index = c.restart_count
        path = run.directory / "logs" / container / f"{index}.log"
        if not path.exists():
            reason = (c.state.get("waiting") or {}).get("reason") or CONTAINER_CREATING
            raise LookupError(
                f'container "{container}" in pod "{name}" is waiting to start: {reason}'
            )
        return path.read_bytes()

    # --- what the kubelet calls ------------------------------------------------------

    def start(self, pod: Obj, ip: str) -> None:
        """Begin running ``pod`` on ``ip`` (once per uid)."""
        uid = str(pod["metadata"].get("uid") or "")
        if uid in self.runs:
            return
        meta = pod["metadata"]
        directory = self.root / f"{meta.get('namespace')}_{meta.get('name')}_{uid}"
        now = format_utc(self._clock.now())
        containers = [ContainerRun(spec=c) for c in containers_of(pod)]
        run = PodRun(pod, ip, directory, now, containers)
        self.runs[uid] = run
        if self._refresher is None:
            self._refresher = asyncio.create_task(_guarded(self._refresh_loop(), "refresh"))
        run.tasks.append(asyncio.create_task(_guarded(self._run_pod(run), run.name)))

    async def terminate(self, pod: Obj, grace_s: float) -> None:
        """Stop the pod's processes: SIGTERM, SIGKILL after ``grace_s``."""
        run = self.runs.get(str(pod["metadata"].get("uid") or ""))
        if run is None:
            return
        run.terminating = True
        self._wake()
        procs = [c.process for c in run.containers if c.process is not None and c.process.alive]
        for proc in procs:
            await self._event(run, "Normal", "Killing", f"Stopping container {proc.container}")
        await asyncio.gather(*(p.stop(self._wall, grace_s) for p in procs))
        await self._end(run)

    def forget(self, live: set[str]) -> None:
        """Kill the processes of pods that are gone from the API."""
        for uid in set(self.runs) - live:
            run = self.runs[uid]
            run.terminating = True
            for c in run.containers:
                if c.process is not None:
                    c.process.signal(signal.SIGKILL)
            task = asyncio.create_task(self._end(run))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def stop(self) -> None:
        """Stop every process (SIGTERM, SIGKILL after a few seconds) and every task."""
        for run in self.runs.values():
            run.terminating = True
        procs = [c.process for r in self.runs.values() for c in r.containers if c.process]
        await asyncio.gather(*(self._stop_wall(p) for p in procs))
        for run in list(self.runs.values()):
            await self._end(run)
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
            self._refresher = None

    @staticmethod
    async def _stop_wall(proc: LocalProcess) -> None:
        if not proc.alive:
            return
        proc.signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(STOP_GRACE_S):
                await proc.proc.wait()
        except TimeoutError:
            proc.signal(signal.SIGKILL)
            await proc.proc.wait()

    async def _end(self, run: PodRun) -> None:
        current = asyncio.current_task()
        tasks = [t for t in [*run.tasks, run.writer] if t is not None and t is not current]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for c in run.containers:
            if c.process is not None and c.process.alive:
                c.process.signal(signal.SIGKILL)
                await c.process.proc.wait()
        if self.runs.get(run.uid) is run:
            del self.runs[run.uid]

    # --- sources ---------------------------------------------------------------------

    def _source_changed(self, key: str, old: Any, new: Any) -> None:
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    @staticmethod
    async def _change(changed: asyncio.Event, timeout_s: float) -> None:
        """Return once ``changed`` (``self._changed`` as taken before the attempt that
        failed) is set, or after ``timeout_s`` (wall)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await changed.wait()

    def _lookup(self, namespace: str) -> Callable[[str, str], dict[str, str] | None]:
        def lookup(kind: str, name: str) -> dict[str, str] | None:
            data = self._data(kind, namespace, name)
            return (
                None if data is None else {k: v.decode(errors="replace") for k, v in data.items()}
            )

        return lookup

    def _data(self, kind: str, namespace: str, name: str) -> dict[str, bytes] | None:
        source = self._secrets if kind == SECRET else self._configmaps
        obj = source.items.get(f"{namespace}/{name}")
        return None if obj is None else decoded(obj, kind == SECRET)

    async def _refresh_loop(self) -> None:
        """Keep Secret and ConfigMap volumes equal to their objects."""
        while True:
            await self._changed.wait()  # a change during the pass sets the next one
            for run in list(self.runs.values()):
                if run.mounts and not run.terminating:
                    with contextlib.suppress(VolumeError, OSError):
                        layout(run, self._data)

    # --- one pod ---------------------------------------------------------------------

    async def _run_pod(self, run: PodRun) -> None:
        run.directory.mkdir(parents=True, exist_ok=True)
        self._publish(run)
        reported = ""
        while not run.terminating:
            changed = self._changed
            try:
                layout(run, self._data)
                break
            except VolumeError as exc:
                message = f"MountVolume.SetUp failed: {exc}"
                if message != reported:
                    reported = message
                    await self._event(run, "Warning", "FailedMount", message)
                await self._change(changed, RETRY_S)
        if run.terminating:
            return
        run.kubeconfig = service_account(run, self._credentials)
        for container in run.containers:
            work = self._run_container(run, container)
            run.tasks.append(asyncio.create_task(_guarded(work, f"{run.name}/{container.name}")))

    async def _run_container(self, run: PodRun, c: ContainerRun) -> None:
        policy = str((run.pod.get("spec") or {}).get("restartPolicy") or "Always")
        while not run.terminating:
            changed = self._changed
            try:
                c.env = environment(run, c, self._lookup(run.namespace), clock_env(self._clock))
            except ConfigError as exc:
                await self._config_error(run, c, str(exc))
                await self._change(changed, RETRY_S)
                continue
            code = await self._one_start(run, c)
            if _stopping(run):
                return
            if policy == "Never" or (policy == "OnFailure" and code == 0):
                c.done = True
                self._publish(run)
                return
            finished = self._clock.now().timestamp()
            wait = restart_wait(c.backoff, finished, finished)
            if wait > 0:
                await self._back_off(run, c, wait)
            c.backoff = advanced(c.backoff, self._clock.now().timestamp())
            # The count and the last state change together: a status written while
            # the next start is being spawned must not show one without the other.
            if "terminated" in c.state:
                c.last_state = c.state
            c.restart_count += 1

    async def _config_error(self, run: PodRun, c: ContainerRun, message: str) -> None:
        if "terminated" in c.state:
            c.last_state = c.state
        c.state = {"waiting": {"reason": CONFIG_ERROR, "message": message}}
        self._publish(run)
        if c.reported != message:
            c.reported = message
            await self._event(run, "Warning", "Failed", f"Error: {message}")

    async def _back_off(self, run: PodRun, c: ContainerRun, wait: float) -> None:
        delay = c.backoff.delay_s if c.backoff else wait
        message = (
            f"back-off {delay:g}s restarting failed container={c.name} "
            f"pod={run.name}_{run.namespace}({run.uid})"
        )
        c.last_state = c.state
        c.state = {"waiting": {"reason": CRASH_LOOP, "message": message}}
        self._publish(run)
        await self._event(
            run,
            "Warning",
            "BackOff",
            f"Back-off restarting failed container {c.name} in pod "
            f"{run.name}_{run.namespace}({run.uid})",
        )
        await self._clock.sleep(wait)

    async def _spawn(self, run: PodRun, c: ContainerRun, log: IO[bytes]) -> LocalProcess:
        # Dies with the sandbox even when the sandbox is SIGKILLed; spawned from the
        # loop's thread, which outlives every child (sandbox.cluster.pdeath).
        command = pdeath.tied(argv(run, c, c.env), c.env.get("PATH", os.defpath))
        proc = await asyncio.create_subprocess_exec(
            *command,
            env=c.env,
            cwd=ROOT,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        return LocalProcess(run.namespace, run.name, c.name, proc, Path(log.name))

    async def _one_start(self, run: PodRun, c: ContainerRun) -> int:
        """Start the container once, watch it with its probes until it exits."""
        path = run.directory / "logs" / c.name / f"{c.restart_count}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):  # each start writes its own message
            (run.directory / "termination" / c.name).unlink()
        failure = ""
        with path.open("ab") as log:
            try:
                process = await self._spawn(run, c, log)
            except OSError as exc:
                failure = f"failed to start container {c.name}: {exc}"
                log.write(f"{failure}\n".encode())
                process = None
        started = format_utc(self._clock.now())
        c.container_id = f"sandbox://{uuid.uuid4().hex}"
        if c.state.get("terminated") or c.state.get("waiting", {}).get("reason") == CRASH_LOOP:
            c.last_state = c.state if "terminated" in c.state else c.last_state
        if process is None:
            code = START_ERROR_CODE
        else:
            c.process, c.created = process, True
            c.state = {"running": {"startedAt": started}}
            c.ready = "readinessProbe" not in c.spec
            self._publish(run)
            await self._event(run, "Normal", "Started", f"Started container {c.name}")
            code = await self._watch(run, c, process)
        c.created = True
        c.ready = False
        finished = format_utc(self._clock.now())
        said = failure or message(run, c, code, path)
        c.state = terminated(code, started, finished, said, c.container_id)
        if process is None:
            c.state["terminated"]["reason"] = START_ERROR
        self._publish(run)
        return code

    async def _watch(self, run: PodRun, c: ContainerRun, process: LocalProcess) -> int:
        probes = []
        for kind in ("readinessProbe", "livenessProbe"):
            if isinstance(c.spec.get(kind), dict):
                probes.append(asyncio.create_task(self._probe(run, c, process, kind)))
        try:
            return await process.proc.wait()
        finally:
            for task in probes:
                task.cancel()
            for task in probes:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _probe(self, run: PodRun, c: ContainerRun, process: LocalProcess, kind: str) -> None:
        probe = probe_of(run, c, kind)
        liveness = kind == "livenessProbe"
        counter = Counter(liveness, probe.success_threshold, probe.failure_threshold)
        label = "Liveness" if liveness else "Readiness"
        await self._wall.sleep(probe.initial_delay_s)
        while process.alive:
            try:
                ok, why = await check(probe, c.spec, run.ip, c.env, str(ROOT))
            except Exception as exc:  # a malformed probe fails; it never stops the kubelet
                ok, why = False, f"probe errored: {exc}"
            if not ok and process.alive:
                await self._event(run, "Warning", "Unhealthy", f"{label} probe failed: {why}")
            if counter.add(ok) and process.alive:
                if not liveness:
                    c.ready = counter.state
                    self._publish(run)
                elif not counter.state:
                    message = f"Container {c.name} failed liveness probe, will be restarted"
                    await self._event(run, "Normal", "Killing", message)
                    await process.stop(self._wall, grace(run.pod, c.spec[kind]))
                    return
            await self._wall.sleep(probe.period_s)

    # --- writes ----------------------------------------------------------------------

    def _publish(self, run: PodRun) -> None:
        """Write the pod's status soon (writes coalesce; the latest state wins)."""
        run.dirty = True
        if run.writer is None or run.writer.done():
            run.writer = asyncio.create_task(self._write(run))

    async def _write(self, run: PodRun) -> None:
        while run.dirty and not run.terminating:
            run.dirty = False
            now = format_utc(self._clock.now())
            status = pod_status(run.pod, run.containers, run.ip, now, run.started, run.since)
            meta = run.pod["metadata"]
            try:
                await self._gateway.patch(
                    PODS, meta["name"], {"status": status}, meta["namespace"], "merge", "status"
                )
            except NotFound:
                return
            except KubeError:
                run.dirty = True
                await asyncio.sleep(RETRY_S)

    async def _event(self, run: PodRun, kind: str, reason: str, message: str) -> None:
        await events.record(self._gateway, self._clock, run.pod, KUBELET, kind, reason, message)


async def _guarded(work: Coroutine[Any, Any, None], what: str) -> None:
    """Run ``work``; an unexpected error is logged, not lost with its task."""
    try:
        await work
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("process runtime: %s stopped on an error", what)


def _stopping(run: PodRun) -> bool:
    """Whether the pod is being stopped (read after an await: it may have changed)."""
    return run.terminating
