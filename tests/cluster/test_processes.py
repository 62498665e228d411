"""The process kubelet: pods of our image run as local processes, built from the spec."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandbox.cluster.endpoints import ENDPOINTS
from shared.clock import ScaledClock
from shared.errors import BadRequest
from shared.resources import CONFIGMAPS, PODS, SECRETS, SERVICES, Resource
from tests.cluster.processkit import (
    NAMESPACE,
    NODE,
    World,
    container,
    local_pod,
    phase,
    ready,
    state,
    waiting_reason,
    world,
)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(60),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]
_RBAC = "rbac.authorization.k8s.io"
ROLES = Resource(_RBAC, "v1", "roles", "Role")
ROLEBINDINGS = Resource(_RBAC, "v1", "rolebindings", "RoleBinding")
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")


def secret(name: str, **data: str) -> dict[str, Any]:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": encoded}


def config_map(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def read(path: str) -> str:
    """A file's text (small files: read without a thread)."""
    return Path(path).read_text(encoding="utf-8")


def output(w: World, name: str, container_name: str = "main") -> str:
    try:
        text = w.runtime.logs(NAMESPACE, name, container_name, False)
    except LookupError:
        return ""  # not started yet
    return (text or b"").decode()


async def first_line(w: World, name: str) -> Any:
    async def check() -> str:
        return output(w, name).split("\n", 1)[0] if "\n" in output(w, name) else ""

    line: str = await w.until(check, what=f"output of {name}")
    return json.loads(line)


async def test_env_is_resolved_from_every_kind_of_reference(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.gateway.create(SECRETS, secret("creds", token="s3cret"), NAMESPACE)
        await w.gateway.create(CONFIGMAPS, config_map("conf", level="debug"), NAMESPACE)
        names = [
            "PLAIN", "EXPANDED", "FROM_SECRET", "FROM_CM", "OPTIONAL", "NAME", "NS", "UID",
            "IP", "NODE", "SA", "CM_level", "HOSTNAME",
        ]  # fmt: skip
        env = [
            {"name": "PLAIN", "value": "one"},
            {"name": "EXPANDED", "value": "$(PLAIN)-two-$$(PLAIN)"},
            {
                "name": "FROM_SECRET",
                "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}},
            },
            {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "conf", "key": "level"}}},
            {
                "name": "OPTIONAL",
                "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": True}},
            },
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
        ]
        main = container(
            "env", *names, env=env, envFrom=[{"configMapRef": {"name": "conf"}, "prefix": "CM_"}]
        )
        await w.gateway.create(PODS, local_pod("envy", main, restartPolicy="Never"), NAMESPACE)
        pod = await w.pod_until("envy", lambda p: phase(p) == "Succeeded")
        got = await first_line(w, "envy")
        assert got == {
            "PLAIN": "one",
            "EXPANDED": "one-two-$(PLAIN)",
            "FROM_SECRET": "s3cret",
            "FROM_CM": "debug",
            "OPTIONAL": None,
            "NAME": "envy",
            "NS": NAMESPACE,
            "UID": pod["metadata"]["uid"],
            "IP": pod["status"]["podIP"],
            "NODE": NODE,
            "SA": "default",
            "CM_level": "debug",
            "HOSTNAME": "envy",
        }
        terminated = state(pod)["state"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ({"secretKeyRef": {"name": "absent", "key": "k"}}, 'secret "absent" not found'),
        (
            {"secretKeyRef": {"name": "creds", "key": "nokey"}},
            "couldn't find key nokey in Secret team-a/creds",
        ),
        ({"configMapKeyRef": {"name": "absent", "key": "k"}}, 'configmap "absent" not found'),
        ({"fieldRef": {"fieldPath": "spec.bogus"}}, 'unsupported fieldPath: "spec.bogus"'),
        ({"resourceFieldRef": {"resource": "limits.cpu"}}, "resourceFieldRef is not supported"),
    ],
    ids=["missing-secret", "missing-key", "missing-configmap", "bad-field", "resource-field"],
)
async def test_a_bad_env_reference_keeps_the_container_in_config_error(
    tmp_path: Path, ref: dict[str, Any], message: str
) -> None:
    async with world(tmp_path) as w:
        await w.gateway.create(SECRETS, secret("creds", token="t"), NAMESPACE)
        main = container("env", "X", env=[{"name": "X", "valueFrom": ref}])
        await w.gateway.create(PODS, local_pod("bad", main), NAMESPACE)

        def waiting(p: dict[str, Any]) -> bool:
            return waiting_reason(p) == "CreateContainerConfigError"

        pod = await w.pod_until("bad", waiting)
        assert message in state(pod)["state"]["waiting"]["message"]
        assert phase(pod) == "Pending"
        assert w.runtime.of(NAMESPACE, "bad") is None
        assert "Failed" in await w.reasons("bad")


@pytest.mark.timeout(20)  # a frozen event loop shows as this test's timeout
async def test_a_config_error_waits_for_a_change_without_anyone_clearing_a_flag(
    tmp_path: Path,
) -> None:
    """A container in CreateContainerConfigError retries at the next Secret or ConfigMap
    change after its attempt, or a second later. It once waited on a flag that only the
    volume refresher cleared: a change that reached it before the refresher ran made it
    retry without end and without yielding, freezing the sandbox. With the refresher
    stopped (the worst case of that race), changes must still leave it calm."""
    async with world(tmp_path) as w:
        ref = {"secretKeyRef": {"name": "absent", "key": "k"}}
        main = container("env", "X", env=[{"name": "X", "valueFrom": ref}])
        await w.gateway.create(PODS, local_pod("stuck", main, restartPolicy="Never"), NAMESPACE)
        await w.pod_until("stuck", lambda p: waiting_reason(p) == "CreateContainerConfigError")
        refresher = w.runtime._refresher
        assert refresher is not None
        refresher.cancel()
        for i in range(3):
            await w.gateway.create(SECRETS, secret(f"other-{i}", k="v"), NAMESPACE)
            await asyncio.sleep(0.05)
        await w.gateway.create(SECRETS, secret("absent", k="here"), NAMESPACE)
        await w.pod_until("stuck", lambda p: phase(p) == "Succeeded")
        assert await first_line(w, "stuck") == {"X": "here"}


async def test_a_missing_secret_starts_the_container_once_it_exists(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        ref = {"secretKeyRef": {"name": "later", "key": "k"}}
        main = container("env", "X", env=[{"name": "X", "valueFrom": ref}])
        await w.gateway.create(PODS, local_pod("waits", main, restartPolicy="Never"), NAMESPACE)
        await w.pod_until(
            "waits", lambda p: "waiting" in (state(p).get("state") or {}) and phase(p) == "Pending"
        )
        await w.gateway.create(SECRETS, secret("later", k="here"), NAMESPACE)
        await w.pod_until("waits", lambda p: phase(p) == "Succeeded")
        assert await first_line(w, "waits") == {"X": "here"}


async def test_secret_and_config_map_volumes_are_files_that_follow_their_objects(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        await w.gateway.create(SECRETS, secret("tls", crt="one", key="k1", extra="x"), NAMESPACE)
        await w.gateway.create(CONFIGMAPS, config_map("conf", a="A"), NAMESPACE)
        volumes = [
            {
                "name": "tls",
                "secret": {
                    "secretName": "tls",
                    "defaultMode": 0o400,
                    "items": [
                        {"key": "crt", "path": "tls.crt"},
                        {"key": "key", "path": "d/tls.key"},
                    ],
                },
            },
            {"name": "conf", "configMap": {"name": "conf"}},
            {"name": "scratch", "emptyDir": {}},
        ]
        mounts = [
            {"name": "tls", "mountPath": "/etc/tls", "readOnly": True},
            {"name": "conf", "mountPath": "/etc/conf"},
            {"name": "scratch", "mountPath": "/tmp"},
        ]
        main = container(
            "files",
            "/etc/tls/tls.crt",
            "/etc/tls/d/tls.key",
            "/etc/conf/a",
            "/etc/tlsx/not-a-mount",
            env=[{"name": "CERT", "value": "/etc/tls/tls.crt"}],
            volumeMounts=mounts,
        )
        await w.gateway.create(PODS, local_pod("vols", main, volumes=volumes), NAMESPACE)
        crt, key, conf, other = await first_line(w, "vols")
        pod = await w.pod("vols")
        base = tmp_path / "pods" / f"{NAMESPACE}_vols_{pod['metadata']['uid']}" / "volumes"
        assert crt == str(base / "tls" / "tls.crt")
        assert other == "/etc/tlsx/not-a-mount"
        assert read(crt) == "one"
        assert read(key) == "k1"
        assert read(conf) == "A"
        assert os.stat(crt).st_mode & 0o777 == 0o400
        assert not (base / "tls" / "extra").exists()
        assert (base / "scratch").is_dir()

        current = await w.gateway.get(SECRETS, "tls", NAMESPACE)
        current["data"]["crt"] = base64.b64encode(b"two").decode()
        await w.gateway.replace(SECRETS, "tls", current, NAMESPACE)
        await w.until(lambda: asyncio.sleep(0, read(crt) == "two"), what="the renewed file")
        process = w.runtime.of(NAMESPACE, "vols")
        assert process is not None
        assert process.alive


async def test_a_missing_volume_secret_holds_the_pod_in_container_creating(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        volumes = [{"name": "tls", "secret": {"secretName": "later"}}]
        main = container(
            "files", "/etc/tls/x", volumeMounts=[{"name": "tls", "mountPath": "/etc/tls"}]
        )
        await w.gateway.create(PODS, local_pod("mount", main, volumes=volumes), NAMESPACE)
        pod = await w.pod_until("mount", lambda p: bool(state(p).get("state")))
        assert state(pod)["state"] == {"waiting": {"reason": "ContainerCreating"}}
        await w.until(lambda: _has(w.reasons("mount"), "FailedMount"), what="FailedMount")
        await w.gateway.create(SECRETS, secret("later", x="ok"), NAMESPACE)
        path = (await first_line(w, "mount"))[0]
        assert read(path) == "ok"


async def _has(reasons: Any, reason: str) -> bool:
    return reason in await reasons


async def test_the_service_account_kubeconfig_has_exactly_the_accounts_rbac(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        role = {
            "apiVersion": f"{_RBAC}/v1",
            "kind": "Role",
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        }
        binding = {
            "apiVersion": f"{_RBAC}/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "pod-reader"},
            "roleRef": {"apiGroup": _RBAC, "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": NAMESPACE}],
        }
        await w.gateway.create(ROLES, role, NAMESPACE)
        await w.gateway.create(ROLEBINDINGS, binding, NAMESPACE)
        pods, secrets = (
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            f"/api/v1/namespaces/{NAMESPACE}/secrets",
        )
        main = container("kube", pods, secrets)
        body = local_pod("sa", main, serviceAccountName="reader", restartPolicy="Never")
        await w.gateway.create(PODS, body, NAMESPACE)
        await w.pod_until("sa", lambda p: phase(p) == "Succeeded")
        assert await first_line(w, "sa") == {pods: 200, secrets: 403}

        main = container("env", "KUBECONFIG")
        body = local_pod("nosa", main, automountServiceAccountToken=False, restartPolicy="Never")
        await w.gateway.create(PODS, body, NAMESPACE)
        await w.pod_until("nosa", lambda p: phase(p) == "Succeeded")
        assert await first_line(w, "nosa") == {"KUBECONFIG": None}


def probe(path: str, port: Any = "http", **timing: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": port}, "periodSeconds": 1, **timing}


def server(port: int = 8080, **fields: Any) -> dict[str, Any]:
    return container("serve", str(port), ports=[{"name": "http", "containerPort": port}], **fields)


def service(name: str, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "selector": selector,
            "ports": [{"name": "web", "port": 80, "targetPort": "http"}],
        },
    }


async def test_readiness_gates_ready_and_the_services_endpoints(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.gateway.create(SERVICES, service("web", {"app": "web"}), NAMESPACE)
        flag = "/data/ready"
        main = server(
            readinessProbe=probe("/ready"),
            env=[{"name": "READY_FILE", "value": flag}],
            volumeMounts=[{"name": "data", "mountPath": "/data"}],
        )
        body = local_pod(
            "web-1", main, labels={"app": "web"}, volumes=[{"name": "data", "emptyDir": {}}]
        )
        await w.gateway.create(PODS, body, NAMESPACE)
        pod = await w.pod_until(
            "web-1",
            lambda p: phase(p) == "Running" and bool(state(p).get("state", {}).get("running")),
        )
        ip = pod["status"]["podIP"]

        async def endpoints() -> dict[str, Any]:
            return await w.gateway.get(ENDPOINTS, "web", NAMESPACE)

        unready = await w.until(
            lambda: _subsets_with(endpoints(), "notReadyAddresses"), what="an unready address"
        )
        assert [a["ip"] for a in unready[0]["notReadyAddresses"]] == [ip]
        assert unready[0]["ports"] == [{"name": "web", "port": 8080, "protocol": "TCP"}]
        assert not ready(await w.pod("web-1"))
        condition = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
        assert (condition["reason"], condition["message"]) == (
            "ContainersNotReady",
            "containers with unready status: [main]",
        )

        uid = pod["metadata"]["uid"]
        data = tmp_path / "pods" / f"{NAMESPACE}_web-1_{uid}" / "volumes" / "data"
        (data / "ready").write_text("yes")
        await w.pod_until("web-1", ready)
        subsets = await w.until(
            lambda: _subsets_with(endpoints(), "addresses"), what="a ready address"
        )
        assert [a["ip"] for a in subsets[0]["addresses"]] == [ip]
        assert "notReadyAddresses" not in subsets[0]
        async with httpx.AsyncClient() as client:
            answer = (await client.get(f"http://{ip}:8080/whoami")).json()
        assert answer["address"] == ip  # the wildcard bind landed on the pod's address


async def _subsets_with(endpoints: Any, key: str) -> list[dict[str, Any]] | None:
    subsets = (await endpoints).get("subsets") or []
    return subsets if any(s.get(key) for s in subsets) else None


async def test_a_failed_liveness_probe_restarts_the_container(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        main = server(
            livenessProbe=probe("/healthz", failureThreshold=1),
            env=[{"name": "SICK_FILE", "value": "/tmp"}],  # exists: always sick
        )
        await w.gateway.create(PODS, local_pod("sick", main), NAMESPACE)
        pod = await w.pod_until("sick", lambda p: state(p).get("restartCount", 0) >= 1, 30)
        assert "terminated" in state(pod)["lastState"]
        assert "Killing" in await w.reasons("sick")
        assert any("Liveness probe failed" in m for m in await w.messages("sick"))


async def test_a_crashing_container_backs_off_and_kubectl_shows_why(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        main = container(
            "crash",
            env=[{"name": "COUNTER_FILE", "value": "/data/count"}],
            volumeMounts=[{"name": "data", "mountPath": "/data"}],
            terminationMessagePolicy="FallbackToLogsOnError",
        )
        body = local_pod("crashy", main, volumes=[{"name": "data", "emptyDir": {}}])
        await w.gateway.create(PODS, body, NAMESPACE)

        def backing_off(p: dict[str, Any]) -> bool:
            return waiting_reason(p) == "CrashLoopBackOff"

        pod = await w.pod_until("crashy", backing_off)
        status = state(pod)
        # The first exit restarts at once; the second waits 10 s (the kubelet's back-off).
        assert status["restartCount"] == 1
        waiting = status["state"]["waiting"]["message"]
        assert "back-off 10s restarting failed container=main" in waiting
        last = status["lastState"]["terminated"]
        assert (last["exitCode"], last["reason"], last["message"]) == (3, "Error", "start 2\n")
        assert phase(pod) == "Running"
        assert "BackOff" in await w.reasons("crashy")

        current = await asyncio.to_thread(w.kubectl, "logs", "crashy")
        assert (current.returncode, current.stdout) == (0, "start 2\n"), current.stderr
        listed = await asyncio.to_thread(w.kubectl, "get", "pod", "crashy", "--no-headers")
        assert listed.stdout.split()[2:4] == ["CrashLoopBackOff", "1"], listed.stdout
        shown = await asyncio.to_thread(w.kubectl, "describe", "pod", "crashy")
        assert "CrashLoopBackOff" in shown.stdout
        assert "Exit Code:    3" in shown.stdout


async def test_kubectl_logs_previous_after_a_restart(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.gateway.create(PODS, local_pod("twice", server()), NAMESPACE)
        await w.until(lambda: asyncio.sleep(0, "listening" in output(w, "twice")), what="serving")
        first = w.runtime.of(NAMESPACE, "twice")
        assert first is not None
        first.signal(signal.SIGKILL)
        await w.pod_until(
            "twice",
            lambda p: "running" in state(p).get("state", {}) and state(p)["restartCount"] == 1,
        )
        await w.until(lambda: asyncio.sleep(0, "listening" in output(w, "twice")), what="again")
        second = w.runtime.of(NAMESPACE, "twice")
        assert second is not None
        previous = await asyncio.to_thread(w.kubectl, "logs", "twice", "--previous")
        current = await asyncio.to_thread(w.kubectl, "logs", "twice", "--tail=1")
        assert previous.stdout.endswith(f"pid {first.pid}\n"), previous.stderr
        assert current.stdout.endswith(f"pid {second.pid}\n"), current.stderr


async def test_pod_log_answers_as_a_kubelet_for_every_kind_of_pod(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        simulated = local_pod("sim", {"name": "main", "image": "busybox"})
        await w.gateway.create(PODS, simulated, NAMESPACE)
        await w.pod_until("sim", lambda p: phase(p) == "Running")
        shown = await asyncio.to_thread(w.kubectl, "logs", "sim")
        assert (shown.returncode, shown.stdout) == (0, "")
        shown = await asyncio.to_thread(w.kubectl, "logs", "sim", "--previous")
        assert 'previous terminated container "main" in pod "sim" not found' in shown.stderr
        shown = await asyncio.to_thread(w.kubectl, "logs", "sim", "-c", "other")
        assert "container other is not valid for pod sim" in shown.stderr
        two = local_pod("two", {"name": "a", "image": "busybox"}, {"name": "b", "image": "busybox"})
        await w.gateway.create(PODS, two, NAMESPACE)
        with pytest.raises(
            BadRequest, match=r"must be specified for pod two, choose one of: \[a b\]"
        ):
            await w.gateway.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/two/log")
        for query, message in [
            ("tailLines=-1", "tailLines"),
            ("limitBytes=0", "limitBytes"),
            ("limitBytes=many", "limitBytes"),
        ]:
            with pytest.raises(BadRequest, match=message):
                await w.gateway.request(
                    "GET", f"/api/v1/namespaces/{NAMESPACE}/pods/sim/log?{query}"
                )
        with pytest.raises(BadRequest, match="tailLines"):
            await w.gateway.request(
                "GET", f"/api/v1/namespaces/{NAMESPACE}/pods/sim/log?tailLines=x"
            )


async def test_a_bad_probe_port_name_leaves_the_pod_unready_with_the_reason(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        main = server(readinessProbe=probe("/ready", port="nosuch"))
        await w.gateway.create(PODS, local_pod("badport", main), NAMESPACE)
        await w.until(
            lambda: _any_in(w.messages("badport"), "unable to find named port 'nosuch'"),
            what="the Unhealthy event",
        )
        pod = await w.pod("badport")
        assert phase(pod) == "Running"
        assert not ready(pod)


async def _any_in(messages: Any, text: str) -> bool:
    return any(text in m for m in await messages)


async def test_deleting_a_pod_stops_its_process_then_removes_it(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.gateway.create(PODS, local_pod("gone", server()), NAMESPACE)
        await w.until(lambda: asyncio.sleep(0, "listening" in output(w, "gone")), what="serving")
        process = w.runtime.of(NAMESPACE, "gone")
        assert process is not None
        await w.gateway.delete(PODS, "gone", NAMESPACE)
        await w.until(lambda: _absent(w, "gone"), what="the pod removed")
        assert not process.alive
        assert process.proc.returncode == 0  # it had its SIGTERM
        assert "terminated" in read(str(process.log_path))
        assert "Stopping container main" in await w.messages("gone")
        assert w.runtime.running() == []


async def _absent(w: World, name: str) -> bool:
    names = [p["metadata"]["name"] for p in (await w.gateway.list_all(PODS, NAMESPACE)).items]
    return name not in names


async def test_a_sigkilled_process_is_restarted(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.gateway.create(PODS, local_pod("killed", server()), NAMESPACE)
        await w.pod_until("killed", lambda p: phase(p) == "Running")
        process = w.runtime.of(NAMESPACE, "killed")
        assert process is not None
        process.signal(signal.SIGKILL)
        pod = await w.pod_until(
            "killed", lambda p: state(p).get("restartCount") == 1 and "running" in state(p)["state"]
        )
        assert state(pod)["lastState"]["terminated"]["exitCode"] == 137
        again = w.runtime.of(NAMESPACE, "killed")
        assert again is not None
        assert again.pid != process.pid


def deployment(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [server(8443, readinessProbe=probe("/healthz"))],
                    "terminationGracePeriodSeconds": 2,
                },
            },
        },
    }


async def test_kubectl_scale_runs_three_processes_on_three_addresses(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.gateway.create(DEPLOYMENTS, deployment("hooks", 1), NAMESPACE)
        await w.runtime.wait_ready(NAMESPACE, {"app": "hooks"}, 1, 30)
        scaled = await asyncio.to_thread(w.kubectl, "scale", "deploy/hooks", "--replicas=3")
        assert scaled.returncode == 0, scaled.stderr
        pods = await w.runtime.wait_ready(NAMESPACE, {"app": "hooks"}, 3, 30)
        ips = {p["status"]["podIP"] for p in pods}
        assert len(ips) == 3
        async with httpx.AsyncClient() as client:
            answers = [(await client.get(f"http://{ip}:8443/whoami")).json() for ip in ips]
        assert {a["address"] for a in answers} == ips
        assert len({a["pid"] for a in answers}) == 3
        assert len(w.runtime.running()) == 3

        scaled = await asyncio.to_thread(w.kubectl, "scale", "deploy/hooks", "--replicas=1")
        assert scaled.returncode == 0, scaled.stderr
        await w.until(lambda: asyncio.sleep(0, len(w.runtime.running()) == 1), 30, "scaled in")


async def test_rollout_restart_replaces_the_processes(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.gateway.create(DEPLOYMENTS, deployment("roll", 2), NAMESPACE)
        before = {
            p["metadata"]["name"]
            for p in await w.runtime.wait_ready(NAMESPACE, {"app": "roll"}, 2, 30)
        }
        pids = {p.pid for p in w.runtime.running()}
        done = await asyncio.to_thread(w.kubectl, "rollout", "restart", "deploy/roll")
        assert done.returncode == 0, done.stderr

        async def replaced() -> bool:
            ready_now = await w.runtime.wait_ready(NAMESPACE, {"app": "roll"}, 2, 30)
            names = {p["metadata"]["name"] for p in ready_now}
            running = {p.pid for p in w.runtime.running()}
            return not names & before and len(running) == 2 and not running & pids

        await w.until(replaced, 40, "new processes for the new template")


async def test_a_job_of_our_image_completes_when_its_process_exits_0(tmp_path: Path) -> None:
    jobs = Resource("batch", "v1", "jobs", "Job")
    async with world(tmp_path) as w:
        template = {
            "spec": {"containers": [container("env", "HOSTNAME")], "restartPolicy": "OnFailure"}
        }
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "once"},
            "spec": {"template": template},
        }
        await w.gateway.create(jobs, job, NAMESPACE)

        async def succeeded() -> bool:
            return bool(
                ((await w.gateway.get(jobs, "once", NAMESPACE)).get("status") or {}).get(
                    "succeeded"
                )
            )

        await w.until(succeeded, 30, "the Job's success")


async def test_tcp_and_exec_probes_and_a_malformed_one(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        main = server(
            readinessProbe={"tcpSocket": {"port": "http"}, "periodSeconds": 1},
            livenessProbe={
                "exec": {"command": ["python", "-c", "import sys; sys.exit(0)"]},
                "periodSeconds": 1,
                "failureThreshold": 1,
            },
        )
        await w.gateway.create(PODS, local_pod("probed", main), NAMESPACE)
        await w.pod_until("probed", ready)
        odd = server(readinessProbe={"httpGet": "not a mapping", "periodSeconds": 1})
        await w.gateway.create(PODS, local_pod("odd", odd), NAMESPACE)
        await w.until(lambda: _has(w.reasons("odd"), "Unhealthy"), what="the odd probe failing")
        assert state(await w.pod("probed"))["restartCount"] == 0  # exec liveness held
        assert not ready(await w.pod("odd"))


async def test_endpoints_go_with_their_service(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.gateway.create(SERVICES, service("short", {"app": "short"}), NAMESPACE)
        await w.until(lambda: w.gateway.get(ENDPOINTS, "short", NAMESPACE), what="Endpoints")
        await w.gateway.delete(SERVICES, "short", NAMESPACE)

        async def gone() -> bool:
            items = (await w.gateway.list_all(ENDPOINTS, NAMESPACE)).items
            return all(e["metadata"]["name"] != "short" for e in items)

        await w.until(gone, what="the Endpoints deleted")


async def test_the_termination_message_file_and_a_command_that_cannot_start(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        env = [{"name": "MESSAGE_FILE", "value": "/dev/termination-log"}]
        said = container(
            "say", "why it stopped", env=env, terminationMessagePolicy="FallbackToLogsOnError"
        )
        await w.gateway.create(PODS, local_pod("said", said, restartPolicy="Never"), NAMESPACE)
        pod = await w.pod_until("said", lambda p: phase(p) == "Failed")
        terminated = state(pod)["state"]["terminated"]
        assert (terminated["exitCode"], terminated["message"]) == (1, "why it stopped")

        broken = {
            "name": "main",
            "image": "ghcr.io/galends/gpu-reservation",
            "command": ["/no/such/program"],
        }
        await w.gateway.create(PODS, local_pod("broken", broken, restartPolicy="Never"), NAMESPACE)
        pod = await w.pod_until("broken", lambda p: phase(p) == "Failed")
        terminated = state(pod)["state"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (128, "StartError")
        assert "/no/such/program" in terminated["message"]


async def test_kubectl_logs_follow_streams_until_the_process_ends(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        body = local_pod("talker", container("slow", "one", "two", "three"), restartPolicy="Never")
        await w.gateway.create(PODS, body, NAMESPACE)
        await w.pod_until("talker", lambda p: "running" in state(p).get("state", {}))
        followed = await asyncio.to_thread(w.kubectl, "logs", "-f", "talker")
        assert (followed.returncode, followed.stdout) == (0, "one\ntwo\nthree\n"), followed.stderr


async def test_probes_give_a_slow_start_its_wall_seconds_on_a_fast_clock(
    tmp_path: Path,
) -> None:
    """At 60x a 3 s initial delay counted on the sandbox clock would be 50 ms: a process
    that needs 1.5 wall seconds to listen would be killed at every start and never be
    Ready. Probes time the real process, so they count wall seconds."""
    async with world(tmp_path, ScaledClock(factor=60.0)) as w:
        timings = {"initialDelaySeconds": 3, "failureThreshold": 1}
        main = container(
            "late",
            "1.5",
            "8080",
            ports=[{"name": "http", "containerPort": 8080}],
            livenessProbe=probe("/healthz", **timings),
            readinessProbe=probe("/", **timings),
        )
        await w.gateway.create(PODS, local_pod("slow", main), NAMESPACE)
        pod = await w.pod_until("slow", lambda p: state(p).get("ready") is True, 30)
        assert state(pod).get("restartCount", 0) == 0
        assert "Killing" not in await w.reasons("slow")


async def test_the_back_off_ends_and_the_container_restarts_on_the_sandbox_clock(
    tmp_path: Path,
) -> None:
    # 20 sandbox seconds a wall second: the 10 s and 20 s back-offs pass in 1.5 s.
    async with world(tmp_path, ScaledClock(factor=20.0)) as w:
        main = container(
            "crash",
            env=[{"name": "COUNTER_FILE", "value": "/data/count"}],
            volumeMounts=[{"name": "data", "mountPath": "/data"}],
        )
        body = local_pod("looping", main, volumes=[{"name": "data", "emptyDir": {}}])
        await w.gateway.create(PODS, body, NAMESPACE)
        await w.pod_until("looping", lambda p: state(p).get("restartCount", 0) >= 3, 40)
        assert (await w.reasons("looping")).count("BackOff") >= 2
