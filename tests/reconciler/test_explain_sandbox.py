"""Issue 16 acceptance 1: a new user's walk through ``make sandbox`` with ``kubectl gpures``.

The whole sandbox as ``make sandbox`` starts it (every component, the default scenario:
alice holds a 2-GPU h100 booking open now, bob one opening in 10 minutes, carol none;
the webhook and reconciler run from the chart's release with the sandbox's scheduling
gate), then the real
kubectl runs the plugin ``kubectl-gpures`` found on PATH — the one the package
installs — with the sandbox's kubeconfig. The examples are the README's.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandbox.__main__ import UP_COMPONENTS
from sandbox.runner import Sandbox, SandboxContext
from sandbox.scenario import load_scenario
from shared import vocab
from tests.reconciler.test_integration import kubectl_sandbox_marks

pytestmark = kubectl_sandbox_marks(120)
PLUGIN = Path(sys.executable).parent / "kubectl-gpures"
GPURES = vocab.CRD_SHORT_NAME  # kubectl gpures …
EVERYTHING = list(UP_COMPONENTS)  # what make sandbox starts: the chart's release runs ours
EXAMPLES = Path(__file__).resolve().parents[2] / "sandbox" / "examples"


def pod(namespace: str, name: str, gpus: int = 1) -> dict[str, Any]:
    """An h100 pod as a user writes it (the class label and the class taint's toleration)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {vocab.GPU_CLASS_LABEL: "h100"},
            "annotations": {vocab.SANDBOX_RUN_SECONDS: "36000"},
        },
        "spec": {
            "tolerations": [
                {
                    "key": vocab.GPU_CLASS_LABEL,
                    "operator": "Equal",
                    "value": "h100",
                    "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
                }
            ],
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"limits": {vocab.GPU_RESOURCE: str(gpus)}},
                }
            ],
        },
    }


class User:
    """A terminal: the sandbox's kubeconfig exported, the package's scripts on PATH."""

    ctx: SandboxContext | None = None

    def __init__(self, kubeconfig: Path) -> None:
        self.env = {
            "PATH": f"{PLUGIN.parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "KUBECONFIG": str(kubeconfig),
            "HOME": str(kubeconfig.parent),
            "TZ": "UTC",
        }

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [shutil.which("kubectl") or "kubectl", *args],
            input=stdin,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        done = self.run(*args, stdin=stdin)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def create(self, manifest: dict[str, Any]) -> None:
        self.ok("create", "-f", "-", stdin=json.dumps(manifest))

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(
            self.ok("get", "pod", "-n", namespace, name, "-o", "json")
        )
        return found

    def until(self, *args: str, text: str, within_s: float = 30) -> str:
        """Run ``args`` until its output contains ``text``."""
        deadline = time.monotonic() + within_s
        while True:
            out = self.ok(*args)
            if text in out:
                return out
            assert time.monotonic() < deadline, out
            time.sleep(0.3)


RBAC = "rbac.authorization.k8s.io"


def reader_role(namespace: str) -> dict[str, Any]:
    """What a cluster usually grants a user in their namespace, cut to what explain reads."""
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "Role",
        "metadata": {"name": "pod-reader", "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["get", "list"]}],
    }


def reader_binding(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "pod-reader", "namespace": namespace},
        "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "pod-reader"},
        "subjects": [{"apiGroup": RBAC, "kind": "User", "name": namespace}],
    }


def as_user(ctx: SandboxContext, username: str) -> User:
    """A terminal of ``username`` with a token of their own (RBAC applies)."""
    kube = ctx.handles["kube"]
    path = ctx.state_dir / f"{username}.kubeconfig"
    path.write_text(kube.kubeconfig(token=kube.mint_token(username), user=username))
    return User(path)


@contextmanager
def sandbox(tmp_path: Path) -> Iterator[User]:
    """Everything ``make sandbox`` starts, on a loop thread of its own."""
    ctx = SandboxContext(state_dir=tmp_path, scenario=load_scenario())
    whole = Sandbox(ctx, EVERYTHING)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(whole.start(), loop).result(90)
        admin = User(tmp_path / "kubeconfig")
        admin.ctx = ctx
        yield admin
    finally:
        asyncio.run_coroutine_threadsafe(whole.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory) -> Iterator[User]:
    """One sandbox for the module: the tests use other namespaces, so they never meet."""
    with sandbox(tmp_path_factory.mktemp("explain")) as admin:
        yield admin


def test_a_new_user_reads_why_a_pod_waits_and_why_another_never_starts(user: User) -> None:
    assert PLUGIN.exists(), "the package installs kubectl-gpures next to the interpreter"
    ns = vocab.PRODUCT_NAME
    user.until("get", vocab.CRD_PLURAL, "-n", ns, text="Upcoming")
    listed = json.loads(user.ok("get", vocab.CRD_PLURAL, "-n", ns, "-o", "json"))
    bob_booking = next(o for o in listed["items"] if o["spec"]["owner"] == "bob")
    name, start = bob_booking["metadata"]["name"], bob_booking["spec"]["start"]
    opens = start.replace("T", " ")[:16] + " UTC"

    # A pod waiting for a booking that opens in ten minutes: when will it start? The
    # webhook gated it, so it waits unbound instead of running on the ordinary h100-o1.
    created = user.run("create", "-f", str(EXAMPLES / "bob-training.yaml"))
    assert created.returncode == 0, created.stderr
    assert "held by a scheduling gate until then" in created.stderr
    waiting = user.pod("bob", "training")
    assert waiting["spec"]["schedulingGates"] == [{"name": vocab.SANDBOX_SCHEDULING_GATE}]
    assert "SchedulingGated" in user.ok("get", "pod", "-n", "bob", "training")
    out = user.ok(GPURES, "explain", "-n", "bob", "training")
    assert out.startswith(f"bob/training: waiting for your booking {name}, which opens {opens}")
    assert "(in 10 min)" in out or "(in 9 min)" in out
    assert f"Released by: the window opening at {opens}" in out
    assert f"(SchedulingGated: {vocab.SANDBOX_SCHEDULING_GATE})" in out
    listing = user.ok(GPURES, "list", "-n", "bob")
    assert name in listing
    assert "queued-for-window" in listing
    assert f"starts {opens}" in listing

    # The same with bob's own credentials: his namespace's pods and Events (what a
    # cluster grants a user there) and, through the chart's userAccess Role, the
    # GPUReservations.
    assert user.ctx is not None
    user.create(reader_role("bob"))
    user.create(reader_binding("bob"))
    bob = as_user(user.ctx, "bob")
    own = bob.ok(GPURES, "explain", "-n", "bob", "training")
    assert own.startswith(f"bob/training: waiting for your booking {name}, which opens")
    assert "could not be read" not in own
    # Without any grant in her namespace, carol's read of a pod is refused: a clear
    # error, exit code 1.
    carol = as_user(user.ctx, "carol")
    for command in (("explain", "-n", "carol", "x"), ("list", "-n", "carol")):
        refused = carol.run(GPURES, *command)
        assert refused.returncode == 1, command
        assert "refused" in refused.stderr, command

    # A pod with no booking that tolerates the ordinary h100 pool's taint: nothing gates
    # it, it runs on h100-o1 outside any booking, and explain does not call it waiting.
    user.ok("create", "-f", str(EXAMPLES / "carol-notebook.yaml"))
    out = user.until(GPURES, "explain", "carol/notebook", text="(Running)")
    assert out.startswith("carol/notebook: on node h100-o1 without a booking (Running)")
    assert "not waiting" in out
    assert "running-outside-bookings" in user.ok(GPURES, "list", "-n", "carol")

    # A pod with no booking that no node takes (no ordinary a100 pool): why does it
    # never start?
    user.ok("create", "-f", str(EXAMPLES / "carol-a100.yaml"))
    out = user.ok(GPURES, "explain", "carol/training")
    assert out.startswith("carol/training: not admitted: no booking matches")
    assert "you hold no booking" in out
    assert "It cannot be admitted on demand either" in out
    # The reservation system's own Event is quoted once it has written it.
    out = user.until(GPURES, "explain", "carol/training", text=vocab.REASON_NO_RESERVATION)
    assert "The reservation system said" in out
    assert user.pod("carol", "training")["status"]["phase"] == "Pending"

    # Bob's booking opens (an admin moves its window to start in two seconds; the app
    # pushes it): the reconciler admits the gated pod at the window's start, removing the
    # gate, and the scheduler places it.
    app = user.ctx.endpoints["app"]
    rid = bob_booking["spec"]["reservationId"]
    moved = httpx.post(
        f"{app}/_sandbox/bookings/{rid}/move",
        json={"start": "+2s", "end": bob_booking["spec"]["end"]},
        timeout=10,
    )
    assert moved.status_code == 200, moved.text
    out = user.until(GPURES, "explain", "-n", "bob", "training", text="(Running)", within_s=60)
    assert out.startswith(f"bob/training: admitted under {name} on node h100-")
    admitted = user.pod("bob", "training")
    assert not admitted["spec"].get("schedulingGates")
    assert admitted["metadata"]["annotations"][vocab.BOOKING_REFERENCE] == name


def test_a_full_booking_names_its_holders_and_an_admitted_pod_its_guarantee(user: User) -> None:
    user.until("get", vocab.CRD_PLURAL, "-n", vocab.PRODUCT_NAME, text="Open")
    user.create(pod("alice", "big", gpus=2))
    out = user.until(GPURES, "explain", "-n", "alice", "big", text="on node")
    assert out.startswith("alice/big: admitted under res-")
    assert "Its runtime is guaranteed until" in out

    user.create(pod("alice", "small"))
    out = user.ok(GPURES, "explain", "-n", "alice", "small")
    assert out.startswith("alice/small: waiting: your booking res-")
    assert "is full" in out
    assert "held by your pods big (2 GPUs, guaranteed until" in out
    assert "Estimate: the earliest a holder's guarantee ends is" in out

    missing = user.run(GPURES, "explain", "-n", "alice", "nope")
    assert missing.returncode == 1
    assert "not found" in missing.stderr


def test_a_user_reads_the_controller_lease_and_the_app_health_with_own_rights(
    user: User,
) -> None:
    """The chart's userAccess lets a user get the leader Lease (and only it): explain
    sees a running controller, and the leader publishes the app's health on it."""
    assert user.ctx is not None
    user.ok("apply", "-f", "-", stdin=json.dumps(reader_role("bob")))
    user.ok("apply", "-f", "-", stdin=json.dumps(reader_binding("bob")))
    bob = as_user(user.ctx, "bob")
    ns, name = vocab.PRODUCT_NAME, vocab.LEADER_LEASE_NAME
    got = bob.until("get", "lease", "-n", ns, name, "-o", "json", text=vocab.APP_HEALTH_ANNOTATION)
    health = json.loads(got)["metadata"]["annotations"][vocab.APP_HEALTH_ANNOTATION]
    assert health.startswith("ok since ")
    assert bob.run("get", "lease", "-n", ns).returncode != 0  # no list: that one Lease only
    user.create(pod("bob", "probe"))
    out = bob.ok(GPURES, "explain", "-n", "bob", "probe")
    assert "the controller is not running" not in out
    assert "unreachable" not in out
