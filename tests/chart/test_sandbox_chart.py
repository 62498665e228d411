"""The sandbox installs what the chart renders (``sandbox/chart.py``), so they cannot drift.

Compared against an independent rendering by the chart tests' own helper; the only
difference allowed is the ``caBundle`` the sandbox adds. A second test replays every
Kubernetes call the walker found through the sandbox's RBAC rule matcher over exactly
the objects the sandbox installs. Then a running sandbox (the chart's release, run by
the process kubelet) is read back: every object it holds is the rendered one (RBAC
verbatim; server defaults may add to the others), its service accounts are bound to
nothing else, only the ``caBundle`` (from the certs Secret) and the Endpoints (the
Ready webhook pods' addresses) are its own, and each process runs as the chart's
service account. Last, ``webhook.configuration``
agrees with the chart's webhook configuration on everything DESIGN §4 fixes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox import chart
from shared import vocab
from shared.resources import SECRETS
from tests.chart import render
from tests.chart.rbac_walk import COMPONENTS, walk

NS = "sandbox-ns"
SANDBOX = chart.objects(NS)
RENDERED = render.render(chart.SANDBOX_VALUES, namespace=NS)


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return (obj["kind"], meta.get("namespace", ""), meta["name"])


def test_every_installed_object_is_the_rendered_object() -> None:
    rendered = {_key(d): d for d in [*RENDERED, *render.crds()]}
    for obj in SANDBOX.install_order():
        assert obj == rendered[_key(obj)], _key(obj)


def test_the_sandbox_installs_all_of_the_charts_rbac() -> None:
    rbac = {_key(d) for d in RENDERED if d["kind"] in chart.RBAC_KINDS}
    installed = {_key(d) for d in SANDBOX.install_order() if d["kind"] in chart.RBAC_KINDS}
    assert installed == rbac
    assert set(SANDBOX.service_accounts) == set(COMPONENTS)


def test_the_ca_bundle_is_the_only_difference() -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    trusted = chart.with_ca_bundle(SANDBOX.webhook_configuration, pem)
    assert all(h["clientConfig"]["caBundle"] for h in trusted["webhooks"])
    assert "caBundle" not in SANDBOX.webhook_configuration["webhooks"][0]["clientConfig"]
    assert chart.without_ca_bundle(trusted) == SANDBOX.webhook_configuration


def test_the_sandbox_rbac_allows_every_call_and_refuses_the_forbidden() -> None:
    rbac = pytest.importorskip("sandbox.kube.rbac")
    admission_api = pytest.importorskip("sandbox.kube.admission_api")

    def allowed(component: str, verb: str, group: str, resource: str, name: str) -> bool:
        plural, _, sub = resource.partition("/")
        user = admission_api.UserInfo(f"system:serviceaccount:{NS}:{component}", "uid", ())
        req = rbac.Request(user, verb, group, plural, sub, NS, "" if verb == "create" else name)
        rules = [
            r
            for obj in SANDBOX.rbac[component]
            if obj["kind"] in ("Role", "ClusterRole")
            for r in obj["rules"]
        ]
        return any(rbac.rule_allows(rule, req) for rule in rules)

    names = {
        "leases": vocab.LEADER_LEASE_NAME,
        "secrets": f"{SANDBOX.service_accounts['webhook']}-tls",
        "mutatingwebhookconfigurations": SANDBOX.webhook_configuration["metadata"]["name"],
    }
    found = walk()
    for component in COMPONENTS:
        for verb, group, resource in found.permissions(component):
            name = names.get(resource, "some-object")
            assert allowed(component, verb, group, resource, name), (component, verb, resource)
    assert not allowed("webhook", "delete", "", "pods", "p")
    assert not allowed("webhook", "get", "", "secrets", names["secrets"])
    assert not allowed("certs", "get", "", "secrets", "someone-elses-secret")
    assert not allowed("reconciler", "update", "coordination.k8s.io", "leases", "other-lease")


# --- the running sandbox holds exactly the chart's objects ---------------------------

#: Metadata the API server adds to every stored object.
SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")


def _contains(rendered: Any, stored: Any, where: str = "") -> list[str]:
    """Where ``stored`` lacks or changes what ``rendered`` sets (server defaults may add)."""
    if isinstance(rendered, dict) and isinstance(stored, dict):
        return [p for k, v in rendered.items() for p in _contains(v, stored.get(k), f"{where}.{k}")]
    if isinstance(rendered, list) and isinstance(stored, list) and len(rendered) == len(stored):
        return [
            p
            for i, pair in enumerate(zip(rendered, stored, strict=True))
            for p in _contains(*pair, f"{where}[{i}]")
        ]
    return [] if rendered == stored else [f"{where}: {rendered!r} != {stored!r}"]


def _as_rendered(stored: dict[str, Any]) -> dict[str, Any]:
    out = dict(
        stored, metadata={k: v for k, v in stored["metadata"].items() if k not in SERVER_METADATA}
    )
    out.pop("status", None)
    return out


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A sandbox as ``make sandbox`` starts it (the chart's release, its pods run by the
    process kubelet); what it holds, read at once."""
    pytest.importorskip("sandbox.kube.component")
    from sandbox.install import RESOURCES
    from sandbox.runner import Sandbox, SandboxContext
    from sandbox.scenario import load_scenario

    ctx = SandboxContext(state_dir=tmp_path_factory.mktemp("sandbox"), scenario=load_scenario())
    sandbox = Sandbox(ctx, ["kube", "cluster", "app", "release"])

    async def snapshot() -> dict[str, Any]:
        await sandbox.start()
        try:
            server = ctx.handles["kube"]
            release = ctx.handles["release"]
            objects = chart.objects(ctx.namespace, release.rendered.values)
            held = {}
            for obj in objects.install_order():
                res = RESOURCES[obj["kind"]]
                ns = obj["metadata"].get("namespace") if res.namespaced else None
                held[_key(obj)] = server.get_object(res, obj["metadata"]["name"], ns)
            bindings = [
                *server.store.list("rbac.authorization.k8s.io", "rolebindings"),
                *server.store.list("rbac.authorization.k8s.io", "clusterrolebindings"),
            ]
            endpoints = server.get_object(
                RESOURCES["Endpoints"], objects.webhook_service["metadata"]["name"], ctx.namespace
            )
            secret = server.get_object(SECRETS, objects.webhook_secret, ctx.namespace)
            webhooks = await release.replicas("webhook")
            reconcilers = await release.replicas("reconciler")
            users = {
                "webhook": _user_of(server, _kubeconfig_of(ctx, webhooks[0].name)),
                "reconciler": _user_of(server, _kubeconfig_of(ctx, reconcilers[0].name)),
            }
            refused = await _refused(_kubeconfig_of(ctx, webhooks[0].name), ctx.namespace)
            return {
                "objects": objects,
                "held": held,
                "bindings": bindings,
                "endpoints": endpoints,
                "secret": secret,
                "addresses": sorted((r.ip, r.port) for r in webhooks),
                "users": users,
                "refused": refused,
                "namespace": ctx.namespace,
            }
        finally:
            await sandbox.stop()

    return asyncio.run(snapshot())


def _kubeconfig_of(ctx: Any, pod: str) -> str:
    """The ``KUBECONFIG`` the process kubelet gave the pod's process (its service
    account's token)."""
    runs = ctx.handles["processes"].runs.values()
    run = next(r for r in runs if r.name == pod and r.namespace == ctx.namespace)
    return str(run.containers[0].env["KUBECONFIG"])


async def _refused(kubeconfig: str, namespace: str) -> bool:
    """Whether the API refuses the webhook's account a Secret read (403)."""
    from shared.errors import Forbidden
    from shared.gateway import Gateway

    gateway = Gateway.from_kubeconfig(kubeconfig)
    try:
        await gateway.list_all(SECRETS, namespace)
    except Forbidden:
        return True
    finally:
        gateway.close()
    return False


def _user_of(server: Any, kubeconfig: str) -> str:
    config = yaml.safe_load(Path(kubeconfig).read_text(encoding="utf-8"))
    token = config["users"][0]["user"]["token"]
    return str(server.cluster.authn.authenticate(f"Bearer {token}").username)


@pytest.mark.slow
def test_the_running_sandbox_holds_the_charts_objects(running: dict[str, Any]) -> None:
    objects: chart.ChartObjects = running["objects"]
    for obj in objects.install_order():
        stored = running["held"][_key(obj)]
        assert stored is not None, _key(obj)
        if obj["kind"] in chart.RBAC_KINDS:
            assert _as_rendered(stored) == obj, _key(obj)  # RBAC: verbatim, nothing added
        elif obj["kind"] == "MutatingWebhookConfiguration":
            assert _contains(obj, chart.without_ca_bundle(stored)) == [], _key(obj)
        else:
            assert _contains(obj, stored) == [], _key(obj)


@pytest.mark.slow
def test_the_sandbox_grants_its_accounts_nothing_beyond_the_chart(running: dict[str, Any]) -> None:
    objects: chart.ChartObjects = running["objects"]
    accounts = set(objects.service_accounts.values())
    mine = {
        _key(_as_rendered(b))
        for b in running["bindings"]
        if any(s.get("name") in accounts for s in b.get("subjects") or [])
    }
    rendered = {
        _key(o)
        for o in objects.rbac_objects()
        if o["kind"].endswith("Binding")
        and any(s.get("name") in accounts for s in o.get("subjects") or [])
    }
    assert mine == rendered


@pytest.mark.slow
def test_only_the_ca_bundle_and_the_endpoints_are_the_sandboxs_own(running: dict[str, Any]) -> None:
    objects: chart.ChartObjects = running["objects"]
    mwc = running["held"][_key(objects.webhook_configuration)]
    ca = running["secret"]["data"]["ca.crt"]
    assert [h["clientConfig"]["caBundle"] for h in mwc["webhooks"]] == [ca]
    subsets = running["endpoints"]["subsets"]
    served = sorted((a["ip"], s["ports"][0]["port"]) for s in subsets for a in s["addresses"])
    assert served == running["addresses"]  # the Ready webhook pods, at the chart's port


@pytest.mark.slow
def test_the_components_run_as_the_charts_service_accounts(running: dict[str, Any]) -> None:
    objects: chart.ChartObjects = running["objects"]
    for component in ("webhook", "reconciler"):
        account = objects.service_accounts[component]
        user = f"system:serviceaccount:{running['namespace']}:{account}"
        assert running["users"][component] == user
    assert running["refused"], "the webhook's account read Secrets: RBAC is not enforced"


# --- webhook/configuration.py and the chart agree ------------------------------------


def test_webhook_configuration_module_agrees_with_the_chart() -> None:
    """The sandbox registers the chart's configuration; ``webhook.configuration`` (the
    product's own description, ``python -m webhook.configuration``) must say the same
    on everything DESIGN §4 fixes, under the same names (the webhook's and its match
    condition's); the CEL expressions must decide the same on every sample pod."""
    from webhook import configuration as module

    ns = SANDBOX.namespace
    ours = module.configuration(ns, service=SANDBOX.webhook_service["metadata"]["name"])
    theirs = SANDBOX.webhook_configuration
    assert ours["metadata"]["name"] == theirs["metadata"]["name"]
    fixed = (
        "admissionReviewVersions",
        "rules",
        "failurePolicy",
        "matchPolicy",
        "sideEffects",
        "timeoutSeconds",
        "reinvocationPolicy",
    )
    a, b = ours["webhooks"][0], theirs["webhooks"][0]
    assert a["name"] == b["name"]
    assert [c["name"] for c in a["matchConditions"]] == [c["name"] for c in b["matchConditions"]]
    assert a["matchConditions"] == b["matchConditions"]
    assert {k: a[k] for k in fixed} == {k: b[k] for k in fixed}
    assert a["clientConfig"]["service"] == b["clientConfig"]["service"]
    selector_a = a["namespaceSelector"]["matchExpressions"]
    selector_b = b["namespaceSelector"]["matchExpressions"]
    assert [(e["key"], e["operator"], sorted(e["values"])) for e in selector_a] == [
        (e["key"], e["operator"], sorted(e["values"])) for e in selector_b
    ]
    cel = pytest.importorskip("sandbox.kube.admission.cel")
    conditions = [
        [cel.compile_condition(c["name"], c["expression"]) for c in hook["matchConditions"]]
        for hook in (a, b)
    ]
    for pod in _sample_pods():
        variables = cel.activation(pod, None, {})
        decided = [cel.match(c, variables).matches for c in conditions]
        assert decided[0] == decided[1], pod


def _sample_pods() -> list[dict[str, Any]]:
    gpu = vocab.GPU_RESOURCE

    def pod(labels: dict[str, str], containers: list[Any], init: list[Any] | None = None) -> Any:
        spec: dict[str, Any] = {"containers": containers}
        if init is not None:
            spec["initContainers"] = init
        return {"metadata": {"name": "p", "labels": labels}, "spec": spec}

    plain = {"name": "c", "image": "i"}
    limits = {"name": "c", "image": "i", "resources": {"limits": {gpu: "1"}}}
    requests = {"name": "c", "image": "i", "resources": {"requests": {gpu: "1"}}}
    cpu = {"name": "c", "image": "i", "resources": {"limits": {"cpu": "1"}}}
    return [
        pod({}, [plain]),
        pod({vocab.GPU_CLASS_LABEL: "h100"}, [plain]),
        pod({}, [limits]),
        pod({}, [requests]),
        pod({}, [cpu]),
        pod({}, [plain, limits]),
        pod({}, [plain], [requests]),
        pod({}, [plain], [cpu]),
        pod({"other": "x"}, [cpu], [plain]),
    ]
