"""What the process runtime runs: a pod's containers as the kubelet builds them.

``is_local`` says which pods run as processes (their images' repository is in
``LOCAL_IMAGES``). ``PodRun``/``ContainerRun`` hold a pod's directory, address, mounts
and each container's state and current ``LocalProcess``. ``layout`` lays out the
volumes under ``<pod-dir>/volumes/`` and maps each container's mount paths
(``sandbox.cluster.mounts``); ``argv``, ``mapped`` and ``probe_of`` turn the spec's
command, args and ``exec`` probes into what runs here (``$(VAR)`` expanded, mount paths
rewritten, ``python`` this interpreter); ``message`` is a finished container's
termination message.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.cluster.backoff import Entry
from sandbox.cluster.localstatus import ContainerView
from sandbox.cluster.mounts import Mount, VolumeError, rewrite, volume_files, write_volume
from sandbox.cluster.podenv import CONFIG_MAP, SECRET, Lookup, container_env, expand
from sandbox.cluster.podstatus import HOST_IP
from sandbox.cluster.probes import Probe
from shared.clock import Clock

Obj = dict[str, Any]
#: ``(kind, namespace, name)`` → a Secret's or ConfigMap's data, or None if absent.
DataLookup = Callable[[str, str, str], dict[str, bytes] | None]
#: ``(namespace, service account)`` → kubeconfig text holding that account's token.
Credentials = Callable[[str, str], str]
#: Image repositories whose pods run as local processes: the chart's ``image.repository``.
LOCAL_IMAGES = frozenset({"ghcr.io/galends/gpu-reservation"})
#: The image's ``CMD`` and ``ENV`` (Dockerfile).
IMAGE_CMD = ("python", "-m", "reconciler")
IMAGE_ENV = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp"}
ROOT = Path(__file__).resolve().parents[2]
PODPATH = Path(__file__).resolve().parent / "podpath"
POD_IP_ENV = "SANDBOX_POD_IP"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
#: The kubelet's cap on a message taken from the logs: 80 lines, 2048 bytes.
MESSAGE_LINES, MESSAGE_BYTES = 80, 2048
#: What a container whose process cannot be started ends with (the runtime's).
START_ERROR, START_ERROR_CODE = "StartError", 128


def repository(image: str) -> str:
    """The image's repository: no digest, no tag."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def containers_of(pod: Obj) -> list[Obj]:
    return list((pod.get("spec") or {}).get("containers") or [])


def is_local(pod: Obj) -> bool:
    """Whether every container of the pod runs our image."""
    spec = pod.get("spec") or {}
    every = [*(spec.get("initContainers") or []), *containers_of(pod)]
    return bool(every) and all(repository(str(c.get("image") or "")) in LOCAL_IMAGES for c in every)


def log_tail(path: Path) -> str:
    """The last 80 lines of a log, at most 2048 bytes (``FallbackToLogsOnError``)."""
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    lines = data.splitlines(keepends=True)[-MESSAGE_LINES:]
    return b"".join(lines)[-MESSAGE_BYTES:].decode(errors="replace")


class LocalProcess:
    """One start of one container: a process in its own process group."""

    def __init__(
        self, namespace: str, pod: str, container: str, proc: asyncio.subprocess.Process, log: Path
    ) -> None:
        self.namespace, self.pod, self.container = namespace, pod, container
        self.proc = proc
        self.pid = proc.pid
        self.log_path = log

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the container's processes (SIGKILL: a crash); nothing once
        the process was reaped (its pid, and so its group's id, may be reused)."""
        if not self.alive:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    async def stop(self, clock: Clock, grace_s: float) -> None:
        """SIGTERM, then SIGKILL after ``grace_s`` sandbox seconds."""
        if not self.alive:
            return
        self.signal(signal.SIGTERM)
        waiter = asyncio.ensure_future(self.proc.wait())
        sleeper = asyncio.ensure_future(clock.sleep(max(grace_s, 0.0)))
        try:
            await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
        if self.alive:
            self.signal(signal.SIGKILL)
        await waiter


@dataclass
class ContainerRun(ContainerView):
    """A container of a running pod, with its current process."""

    process: LocalProcess | None = None
    backoff: Entry | None = None
    env: dict[str, str] = field(default_factory=dict)
    reported: str = ""


@dataclass
class PodRun:
    """What the runtime keeps of one pod."""

    pod: Obj
    ip: str
    directory: Path
    started: str
    containers: list[ContainerRun]
    mounts: dict[str, list[Mount]] = field(default_factory=dict)
    since: dict[str, tuple[bool, str]] = field(default_factory=dict)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    terminating: bool = False
    kubeconfig: Path | None = None
    #: Whether a status write is due, and the task writing it.
    dirty: bool = False
    writer: asyncio.Task[None] | None = None

    @property
    def namespace(self) -> str:
        return str(self.pod["metadata"].get("namespace") or "")

    @property
    def name(self) -> str:
        return str(self.pod["metadata"].get("name") or "")

    @property
    def uid(self) -> str:
        return str(self.pod["metadata"].get("uid") or "")


def layout(run: PodRun, data: DataLookup) -> None:
    """Lay out every volume; map every container's mounts (``VolumeError`` if one
    cannot be set up: its Secret or ConfigMap is missing, say)."""
    namespace = run.namespace
    directories: dict[str, Path] = {}
    for volume in (run.pod.get("spec") or {}).get("volumes") or []:
        name = str(volume.get("name") or "")
        directory = run.directory / "volumes" / name
        directories[name] = directory
        if "secret" in volume:
            ref = str((volume["secret"] or {}).get("secretName") or "")
            files = volume_files("secret", volume, namespace, data(SECRET, namespace, ref))
            write_volume(directory, files)
        elif "configMap" in volume:
            ref = str((volume["configMap"] or {}).get("name") or "")
            found = data(CONFIG_MAP, namespace, ref)
            write_volume(directory, volume_files("configMap", volume, namespace, found))
        elif "emptyDir" in volume:
            directory.mkdir(parents=True, exist_ok=True)
        else:
            kinds = sorted(set(volume) - {"name"})
            raise VolumeError(f"volume {name!r}: {kinds} is not supported by the sandbox")
    for container in run.containers:
        mounts = []
        for mount in container.spec.get("volumeMounts") or []:
            volume_dir = directories.get(str(mount.get("name")))
            if volume_dir is None:
                raise VolumeError(f"no volume named {mount.get('name')!r}")
            sub = str(mount.get("subPath") or "")
            target = volume_dir / sub if sub else volume_dir
            mounts.append(Mount(str(mount.get("mountPath")), target))
        path = str(container.spec.get("terminationMessagePath") or DEFAULT_TERMINATION_LOG)
        (run.directory / "termination").mkdir(parents=True, exist_ok=True)
        mounts.append(Mount(path, run.directory / "termination" / container.name))
        run.mounts[container.name] = mounts


def service_account(run: PodRun, credentials: Credentials | None) -> Path | None:
    """The pod's service-account kubeconfig (None when it mounts none)."""
    spec = run.pod.get("spec") or {}
    if spec.get("automountServiceAccountToken") is False or credentials is None:
        return None
    account = str(spec.get("serviceAccountName") or "default")
    path = run.directory / "serviceaccount" / "kubeconfig"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(credentials(run.namespace, account), encoding="utf-8")
    path.chmod(0o600)
    return path


def environment(
    run: PodRun, c: ContainerRun, lookup: Lookup, clock: dict[str, str]
) -> dict[str, str]:
    """The process's whole environment (``ConfigError`` if the spec's cannot be)."""
    mounts = run.mounts.get(c.name, [])
    spec_env = container_env(run.pod, c.spec, run.ip, HOST_IP, lookup)
    env = {k: rewrite(v, mounts, ROOT) for k, v in {**IMAGE_ENV, **spec_env}.items()}
    base = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": os.pathsep.join([str(PODPATH), str(ROOT)]),
        "HOSTNAME": run.name,
        POD_IP_ENV: run.ip,
        **clock,
    }
    if run.kubeconfig is not None:
        base["KUBECONFIG"] = str(run.kubeconfig)
    tmp = rewrite("/tmp", mounts)
    if tmp != "/tmp":
        base["TMPDIR"] = tmp
    return {**base, **env}


def argv(run: PodRun, c: ContainerRun, env: dict[str, str]) -> list[str]:
    command = c.spec.get("command")
    args = c.spec.get("args")
    argv = [str(a) for a in (command or ([] if args else IMAGE_CMD))]
    argv += [str(a) for a in args or []]
    return mapped(run, c, argv, env)


def mapped(run: PodRun, c: ContainerRun, argv: list[str], env: dict[str, str]) -> list[str]:
    """``argv`` as the process runs it: variables expanded, mount paths rewritten,
    ``python`` this interpreter."""
    mounts = run.mounts.get(c.name, [])
    argv = [rewrite(expand(a, env), mounts, ROOT) for a in argv]
    if argv and argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    return argv


def probe_of(run: PodRun, c: ContainerRun, kind: str) -> Probe:
    """The probe, an ``exec`` command mapped as the container's own argv is (an
    ``exec`` probe runs inside the container on a cluster)."""
    spec = dict(c.spec[kind])
    action = spec.get("exec")
    if isinstance(action, dict) and isinstance(action.get("command"), list):
        command = [str(a) for a in action["command"]]
        spec["exec"] = {**action, "command": mapped(run, c, command, c.env)}
    return Probe.of(spec)


def message(run: PodRun, c: ContainerRun, code: int, log: Path) -> str:
    """What the container's termination message is: the file it wrote, else its
    output's tail under ``FallbackToLogsOnError`` after a failure."""
    written = run.directory / "termination" / c.name
    with contextlib.suppress(OSError):
        text = written.read_text(errors="replace")[-4096:]
        if text:
            return text
    if code != 0 and c.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
        return log_tail(log)
    return ""


def grace(pod: Obj, probe: Obj) -> float:
    """The probe's own grace period, else the pod's (30 s by default)."""
    for value in (
        probe.get("terminationGracePeriodSeconds"),
        (pod.get("spec") or {}).get("terminationGracePeriodSeconds"),
    ):
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return float(value)
    return 30.0
