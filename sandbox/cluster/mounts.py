"""Pod volumes as directories under the pod's own directory, and the path mapping.

A process of the sandbox shares the machine's file system, so a ``mountPath`` such as
``/etc/webhook/tls`` cannot be what the process opens. Each volume is a directory
``<pod-dir>/volumes/<name>``; ``volume_files`` (no side effects) says what a ``secret``
or ``configMap`` volume holds (``items``, ``defaultMode``, per-item ``mode``);
``write_volume`` lays the files out as the kubelet's atomic writer does (a
``..data`` link swapped in one rename, each file a link through it) so a reader never
sees half an update. ``rewrite`` maps a value naming a path at or under a container's
``mountPath`` onto the volume's directory (longest mount first): the kubelet runs it on
every env value and argument. A path inside the checkout is never rewritten: the
checkout stands in for the image's files, which on a cluster live apart from any
mount (a checkout under ``/tmp`` would otherwise vanish under an ``emptyDir`` at
``/tmp``, as the chart mounts one).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Obj = dict[str, Any]
#: The kubelet's default file mode of a Secret or ConfigMap volume (0644).
DEFAULT_MODE = 0o644
DATA_LINK = "..data"


class VolumeError(Exception):
    """The volume cannot be set up (a ``FailedMount`` message)."""


@dataclass(frozen=True)
class Mount:
    """A container's ``mountPath`` and the directory standing in for it."""

    path: str
    directory: Path


def volume_files(
    kind: str, volume: Obj, namespace: str, data: dict[str, bytes] | None
) -> dict[str, tuple[bytes, int]]:
    """Relative path → (content, mode) of a ``secret`` or ``configMap`` volume."""
    source = volume.get(kind) or {}
    name = str(source.get("secretName") if kind == "secret" else source.get("name"))
    mode = source.get("defaultMode", DEFAULT_MODE)
    if data is None:
        if source.get("optional"):
            return {}
        noun = "secret" if kind == "secret" else "configmap"
        raise VolumeError(f'{noun} "{name}" not found')
    items = source.get("items")
    if not items:
        return {key: (value, int(mode)) for key, value in data.items()}
    files: dict[str, tuple[bytes, int]] = {}
    for item in items:
        key, path = str(item.get("key") or ""), str(item.get("path") or "")
        if key not in data:
            if source.get("optional"):
                continue
            noun = "secret" if kind == "secret" else "configmap"
            raise VolumeError(f"{noun} references non-existent {noun} key: {key}")
        if not path or path.startswith("/") or ".." in path.split("/"):
            raise VolumeError(f"invalid item path {path!r} in volume {volume.get('name')}")
        files[path] = (data[key], int(item.get("mode", mode)))
    return files


def _current(directory: Path) -> dict[str, tuple[bytes, int]] | None:
    link = directory / DATA_LINK
    if not link.is_symlink():
        return None
    root = directory / os.readlink(link)
    out: dict[str, tuple[bytes, int]] = {}
    for path in root.rglob("*"):
        if path.is_file():
            out[str(path.relative_to(root))] = (path.read_bytes(), path.stat().st_mode & 0o777)
    return out


def write_volume(directory: Path, files: dict[str, tuple[bytes, int]]) -> bool:
    """Make ``directory`` hold ``files``; whether anything changed."""
    directory.mkdir(parents=True, exist_ok=True)
    old = _current(directory)
    if old == files:
        return False
    stamp = f"..{secrets.token_hex(6)}"
    for rel, (content, mode) in files.items():
        target = directory / stamp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(mode)
    (directory / stamp).mkdir(exist_ok=True)
    scratch = directory / "..data_tmp"
    with contextlib.suppress(FileNotFoundError):
        scratch.unlink()
    scratch.symlink_to(stamp)
    previous = os.readlink(directory / DATA_LINK) if old is not None else None
    os.replace(scratch, directory / DATA_LINK)
    tops = {rel.split("/")[0] for rel in files}
    for top in tops:
        link = directory / top
        if not link.is_symlink():
            link.symlink_to(f"{DATA_LINK}/{top}")
    for entry in directory.iterdir():
        if entry.is_symlink() and not entry.name.startswith("..") and entry.name not in tops:
            entry.unlink()
    if previous is not None:
        shutil.rmtree(directory / previous, ignore_errors=True)
    return True


def rewrite(value: str, mounts: list[Mount], image: Path | None = None) -> str:
    """``value`` with a leading mount path replaced by its directory; a path at or
    under ``image`` (the checkout: the image's own files) is left as it is."""
    if image is not None:
        root = str(image).rstrip("/")
        if value == root or value.startswith(root + "/"):
            return value
    for mount in sorted(mounts, key=lambda m: len(m.path), reverse=True):
        base = mount.path.rstrip("/") or "/"
        if value == base:
            return str(mount.directory)
        if value.startswith(base + "/"):
            return str(mount.directory / value[len(base) + 1 :])
    return value
