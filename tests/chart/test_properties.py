"""What the rendered install must be: DESIGN §4's webhook configuration, availability,
non-root containers, consistent certificate names, least-privilege RBAC, settings that
reach the processes, and the vocabulary of ``shared/vocab.py``."""

from __future__ import annotations

import re
from typing import Any

import pytest

from certs.issue import service_dns_names
from shared import vocab
from tests.chart import render
from tests.chart.cases import CASES
from tests.chart.objects import container, env, named, of_kind, one, pod_spec, workloads
from tests.chart.rbac_walk import bound_roles, granted, service_account_of
from webhook.configuration import match_expression

NS = render.NAMESPACE
DEFAULT = render.render(CASES["default"])
CERT_MANAGER = render.render(CASES["cert-manager"])


def _webhook(docs: list[dict[str, Any]]) -> dict[str, Any]:
    hooks = one(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert len(hooks) == 1
    hook: dict[str, Any] = hooks[0]
    return hook


def _gpu_condition() -> str:
    """The webhook's one definition (``tests/chart`` pins what it selects below)."""
    return match_expression()


EXPECTED_WEBHOOK: dict[str, Any] = {
    "name": f"{vocab.PRODUCT_NAME}.{vocab.CRD_GROUP}",
    "admissionReviewVersions": ["v1"],
    "clientConfig": {
        "service": {
            "name": f"{render.RELEASE}-webhook",
            "namespace": NS,
            "path": "/mutate",
            "port": 443,
        }
    },
    "rules": [
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ],
    "failurePolicy": "Ignore",
    "matchPolicy": "Equivalent",
    "sideEffects": "NoneOnDryRun",
    "timeoutSeconds": 3,
    "reinvocationPolicy": "IfNeeded",
    "namespaceSelector": {
        "matchExpressions": [
            {"key": vocab.NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": ["kube-system", NS]}
        ]
    },
    "matchConditions": [{"name": "gpu-pod", "expression": _gpu_condition()}],
}


def test_the_webhook_configuration_is_exactly_design_section_4() -> None:
    assert _webhook(DEFAULT) == EXPECTED_WEBHOOK


def test_the_object_selector_fallback_replaces_match_conditions() -> None:
    hook = _webhook(render.render(CASES["object-selector-fallback"]))
    expected = {k: v for k, v in EXPECTED_WEBHOOK.items() if k != "matchConditions"}
    expected["objectSelector"] = {
        "matchExpressions": [{"key": vocab.GPU_CLASS_LABEL, "operator": "Exists"}]
    }
    assert hook == expected


def _pod(
    labels: dict[str, str] | None = None,
    notes: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
    **resources: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p"}
    if labels is not None:
        meta["labels"] = labels
    if notes is not None:
        meta["annotations"] = notes
    box = {"name": "c", "image": "x", **({"resources": resources} if resources else {})}
    return {"metadata": meta, "spec": {"containers": [box], **(spec or {})}}


def _with_init(obj: dict[str, Any], gpu: dict[str, str]) -> dict[str, Any]:
    init = {"name": "i", "image": "x", "resources": {"limits": gpu}}
    return {**obj, "spec": {**obj["spec"], "initContainers": [init]}}


_GPU = {vocab.GPU_RESOURCE: "1"}
_TAINT = vocab.RESERVATION_TAINT_KEY
#: (new pod, old pod or None for a CREATE, whether the webhook is called).
MATCH_CASES: dict[str, tuple[dict[str, Any], dict[str, Any] | None, bool]] = {
    "labelled": (_pod({vocab.GPU_CLASS_LABEL: "h100"}), None, True),
    "gpu limit": (_pod(limits=_GPU), None, True),
    "gpu request": (_pod(requests=_GPU), None, True),
    "gpu request of 0": (_pod(requests={vocab.GPU_RESOURCE: "0"}), None, True),
    "mig slice": (_pod(limits={"nvidia.com/mig-1g.10gb": "1"}), None, True),
    "amd gpu": (_pod(limits={"amd.com/gpu": "1"}), None, True),
    "intel gpu": (_pod(requests={"gpu.intel.com/i915": "1"}), None, True),
    "other extended resource": (_pod(limits={"example.com/fpga": "1"}), None, False),
    "cpu only": (_pod({"app": "web"}, requests={"cpu": "1"}), None, False),
    "bare": (_pod(), None, False),
    "gpu init container": (_with_init(_pod(), _GPU), None, True),
    "node name": (_pod(spec={"nodeName": "a100-r1"}), None, True),
    "empty node name": (_pod(spec={"nodeName": ""}), None, False),
    "reservation toleration": (
        _pod(spec={"tolerations": [{"key": _TAINT, "operator": "Exists"}]}),
        None,
        True,
    ),
    "exists toleration without key": (
        _pod(spec={"tolerations": [{"operator": "Exists"}]}),
        None,
        True,
    ),
    "exists toleration with empty key": (
        _pod(
            spec={
                "tolerations": [
                    {"key": "", "operator": "Exists", "effect": vocab.TAINT_EFFECT_NO_SCHEDULE}
                ]
            }
        ),
        None,
        True,
    ),
    "other toleration": (
        _pod(spec={"tolerations": [{"key": "dedicated", "operator": "Exists"}]}),
        None,
        False,
    ),
    "galends annotation": (_pod(notes={vocab.BOOKING_REFERENCE: "res-1"}), None, True),
    "user galends annotation": (_pod(notes={vocab.USAGE_GROUP: "ml"}), None, True),
    "other annotation": (_pod(notes={"team": "ml"}), None, False),
    "update removing the label": (_pod(), _pod({vocab.GPU_CLASS_LABEL: "h100"}), True),
    "update removing a toleration": (
        _pod(),
        _pod(spec={"tolerations": [{"operator": "Exists"}]}),
        True,
    ),
    "update adding a toleration": (
        _pod(spec={"tolerations": [{"key": _TAINT, "value": "h100"}]}),
        _pod(),
        True,
    ),
    "update of a plain pod": (_pod({"app": "web"}), _pod(), False),
}


@pytest.mark.parametrize("case", sorted(MATCH_CASES))
def test_the_match_condition_selects_every_pod_that_could_reach_a_reserved_node(
    case: str,
) -> None:
    cel = pytest.importorskip("sandbox.kube.admission.cel")
    condition = cel.compile_condition(
        "gpu-pod", _webhook(DEFAULT)["matchConditions"][0]["expression"]
    )
    obj, old, wanted = MATCH_CASES[case]
    operation = "CREATE" if old is None else "UPDATE"
    variables = cel.activation(obj, old, {"operation": operation})
    assert cel.evaluate(condition, variables) is wanted


def test_the_match_condition_follows_the_gpu_resource_values() -> None:
    """Listed resources outside the prefixes are selected; with no prefixes, an
    unlisted vendor resource is not; the chart renders what the webhook's module
    builds from the same setting."""
    from shared.policy.gpus import GpuResources

    cel = pytest.importorskip("sandbox.kube.admission.cel")
    vals = render.values(
        webhook={
            "gpuResourceWeights": " example.com/gpu=2 , nvidia.com/gpu=1",
            "gpuResourcePrefixes": "",
        }
    )
    expression = _webhook(render.render(vals))["matchConditions"][0]["expression"]
    resources = GpuResources((("example.com/gpu", 2), (vocab.GPU_RESOURCE, 1)), ())
    assert expression == match_expression(resources)
    condition = cel.compile_condition("gpu-pod", expression)

    def called(obj: dict[str, Any]) -> bool:
        return bool(cel.evaluate(condition, cel.activation(obj, None, {"operation": "CREATE"})))

    assert called(_pod(limits={"example.com/gpu": "1"}))
    assert called(_pod(limits=_GPU))
    assert not called(_pod(limits={"amd.com/gpu": "1"}))


def test_excluded_namespaces_always_include_the_release_namespace() -> None:
    vals = render.values(webhook={"excludedNamespaces": ["kube-system", "monitoring"]})
    hook = _webhook(render.render(vals, namespace="gpu"))
    values = hook["namespaceSelector"]["matchExpressions"][0]["values"]
    assert values == ["kube-system", "monitoring", "gpu"]


def test_the_backstop_exempts_daemonsets_of_the_webhooks_excluded_namespaces() -> None:
    vals = render.values(webhook={"excludedNamespaces": ["kube-system", "monitoring"]})
    reconciler = one(render.render(vals, namespace="gpu"), "Deployment", "reconciler")
    assert env(reconciler)["UNADMITTED_EXEMPT_NAMESPACES"] == "kube-system,monitoring,gpu"


@pytest.mark.parametrize("case", sorted(CASES))
def test_webhook_has_at_least_two_replicas_and_a_pdb(case: str) -> None:
    docs = render.render(CASES[case])
    deployment = one(docs, "Deployment", "webhook")
    assert deployment["spec"]["replicas"] >= 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pdb = one(docs, "PodDisruptionBudget", "webhook")
    assert 1 <= pdb["spec"]["minAvailable"] < deployment["spec"]["replicas"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    spread = pod_spec(deployment)["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in spread} >= {"kubernetes.io/hostname"}


def test_webhook_probes_and_ports() -> None:
    box = container(one(DEFAULT, "Deployment", "webhook"))
    assert box["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics"}
    assert box["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    service = one(DEFAULT, "Service", "webhook")
    https = next(p for p in service["spec"]["ports"] if p["port"] == 443)
    assert https["targetPort"] in {p["name"] for p in box["ports"]}


@pytest.mark.parametrize("case", sorted(CASES))
def test_services_select_their_pods_and_name_real_ports(case: str) -> None:
    docs = render.render(CASES[case])
    for component in ("webhook", "reconciler"):
        service = one(docs, "Service", component)
        deployment = one(docs, "Deployment", component)
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()
        names = {p["name"] for p in container(deployment)["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= names


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_container_runs_as_root_or_with_privileges(case: str) -> None:
    for workload in workloads(render.render(CASES[case])):
        pod = pod_spec(workload)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] > 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for box in pod["containers"] + pod.get("initContainers", []):
            ctx = box["securityContext"]
            assert ctx["runAsNonRoot"] is True
            assert ctx["runAsUser"] > 0
            assert ctx["readOnlyRootFilesystem"] is True
            assert ctx["allowPrivilegeEscalation"] is False
            assert ctx["capabilities"] == {"drop": ["ALL"]}
            assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
            assert set(box["resources"]) == {"requests", "limits"}


def test_reconciler_is_one_leader_elected_replica_with_its_identity() -> None:
    deployment = one(DEFAULT, "Deployment", "reconciler")
    assert deployment["spec"]["replicas"] == 1
    variables = env(deployment)
    assert variables["LEADER_ELECTION_ENABLED"] == "true"
    assert variables["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert variables["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    probe = container(deployment)["livenessProbe"]["httpGet"]
    assert probe == {"path": "/health", "port": "http"}


# --- certificates ------------------------------------------------------------------


def _served_secret(docs: list[dict[str, Any]]) -> str:
    volumes = pod_spec(one(docs, "Deployment", "webhook"))["volumes"]
    return str(next(v for v in volumes if v["name"] == "tls")["secret"]["secretName"])


def test_self_signed_mode_names_one_secret_service_and_configuration() -> None:
    job = one(DEFAULT, "Job", "certs")
    variables = env(job)
    service = one(DEFAULT, "Service", "webhook")["metadata"]["name"]
    configuration = one(DEFAULT, "MutatingWebhookConfiguration")["metadata"]["name"]
    assert variables["CERTS_SECRET_NAME"] == _served_secret(DEFAULT)
    assert (
        variables["CERTS_SERVICE_NAME"]
        == service
        == _webhook(DEFAULT)["clientConfig"]["service"]["name"]
    )
    assert variables["CERTS_WEBHOOK_CONFIGURATION"] == configuration
    assert variables["CERTS_CA_SECRET_NAME"] == f"{variables['CERTS_SECRET_NAME']}-ca"
    assert variables["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert container(job)["command"] == ["python", "-m", "certs", "ensure"]
    hooks = job["metadata"]["annotations"]
    assert hooks["helm.sh/hook"] == "post-install,post-upgrade"
    assert "hook-succeeded" in hooks["helm.sh/hook-delete-policy"]
    # The job's own RBAC names exactly those objects.
    roles = bound_roles(DEFAULT, NS, service_account_of(DEFAULT, "Job", "certs"))
    names = {n for r in roles for rule in r["rules"] for n in rule.get("resourceNames", [])}
    assert names == {
        variables["CERTS_SECRET_NAME"],
        variables["CERTS_CA_SECRET_NAME"],
        configuration,
    }
    assert "cert-manager.io/inject-ca-from" not in (
        one(DEFAULT, "MutatingWebhookConfiguration")["metadata"].get("annotations") or {}
    )
    assert not [d for d in DEFAULT if d["apiVersion"].startswith("cert-manager.io/")]


def test_cert_manager_mode_chains_issuers_and_injects_the_serving_ca() -> None:
    docs = CERT_MANAGER
    assert not of_kind(docs, "Job")
    service = one(docs, "Service", "webhook")["metadata"]["name"]
    serving = named(docs, "Certificate", service)
    assert serving["spec"]["secretName"] == _served_secret(docs)
    assert serving["spec"]["dnsNames"] == list(service_dns_names(service, NS))
    assert f"{service}.{NS}.svc" in serving["spec"]["dnsNames"]
    ca_issuer = named(docs, "Issuer", serving["spec"]["issuerRef"]["name"])
    ca_cert = next(c for c in of_kind(docs, "Certificate") if c["spec"].get("isCA"))
    assert ca_issuer["spec"]["ca"]["secretName"] == ca_cert["spec"]["secretName"]
    root = named(docs, "Issuer", ca_cert["spec"]["issuerRef"]["name"])
    assert root["spec"] == {"selfSigned": {}}
    annotations = one(docs, "MutatingWebhookConfiguration")["metadata"]["annotations"]
    assert annotations["cert-manager.io/inject-ca-from"] == f"{NS}/{serving['metadata']['name']}"
    assert _webhook(docs)["clientConfig"]["service"]["name"] == service


def test_both_modes_serve_the_same_secret_to_the_same_service_names() -> None:
    assert _served_secret(DEFAULT) == _served_secret(CERT_MANAGER)
    assert _webhook(DEFAULT)["clientConfig"] == _webhook(CERT_MANAGER)["clientConfig"]
    assert "caBundle" not in _webhook(DEFAULT)["clientConfig"]


# --- RBAC --------------------------------------------------------------------------


def _grants(docs: list[dict[str, Any]], kind: str, component: str) -> set[tuple[str, str, str]]:
    return granted(bound_roles(docs, NS, service_account_of(docs, kind, component)))


ACCOUNTS = (("Deployment", "webhook"), ("Deployment", "reconciler"), ("Job", "certs"))


def test_every_component_has_its_own_service_account() -> None:
    accounts = [service_account_of(DEFAULT, kind, c) for kind, c in ACCOUNTS]
    assert len(set(accounts)) == 3
    assert {d["metadata"]["name"] for d in of_kind(DEFAULT, "ServiceAccount")} == set(accounts)


def test_webhook_cannot_touch_pods_or_secrets() -> None:
    grants = _grants(DEFAULT, "Deployment", "webhook")
    assert {r for _, _, r in grants} <= {vocab.CRD_PLURAL, f"{vocab.CRD_PLURAL}/status", "nodes"}
    assert {(verb, group) for verb, group, r in grants if r == "nodes"} == {
        ("list", ""),
        ("watch", ""),
    }
    assert not {g for g in grants if g[2] in ("pods", "secrets")}


def test_only_the_reconciler_may_delete_pods_and_only_certs_may_touch_secrets() -> None:
    """Secrets: the certs Job, and in self-signed mode the reconciler's certificate
    check — the same grants, on the same two named Secrets; with cert-manager, none."""
    certs = {g for g in _grants(DEFAULT, "Job", "certs") if g[2] == "secrets"}
    for kind, component in ACCOUNTS:
        grants = _grants(DEFAULT, kind, component)
        if component != "reconciler":
            assert ("delete", "", "pods") not in grants
        secrets = {g for g in grants if g[2] == "secrets"}
        assert secrets == (certs if component in ("certs", "reconciler") else set())
    assert _secret_names(DEFAULT, "reconciler") == _secret_names(DEFAULT, "certs")
    reconciler = _grants(CERT_MANAGER, "Deployment", "reconciler")
    assert not [g for g in reconciler if g[2] == "secrets"]


def _secret_names(docs: list[dict[str, Any]], component: str) -> list[list[str]]:
    kind = "Job" if component == "certs" else "Deployment"
    roles = bound_roles(docs, NS, service_account_of(docs, kind, component))
    rules = [r for role in roles for r in role["rules"] if r["resources"] == ["secrets"]]
    return [sorted(r.get("resourceNames") or []) for r in rules]


def test_no_rule_uses_wildcards_and_namespace_objects_use_roles() -> None:
    release_namespace_resources = {
        vocab.CRD_PLURAL,
        f"{vocab.CRD_PLURAL}/status",
        "leases",
        "secrets",
    }
    for role in of_kind(DEFAULT, "Role") + of_kind(DEFAULT, "ClusterRole"):
        for rule in role["rules"]:
            for field in ("verbs", "apiGroups", "resources"):
                assert "*" not in rule[field], role["metadata"]["name"]
            scoped = set(rule["resources"]) <= release_namespace_resources
            assert scoped == (role["kind"] == "Role"), (role["metadata"]["name"], rule)


def test_the_lease_rule_names_the_vocabulary_lease() -> None:
    roles = bound_roles(DEFAULT, NS, service_account_of(DEFAULT, "Deployment", "reconciler"))
    lease_rules = [r for role in roles for r in role["rules"] if r["resources"] == ["leases"]]
    named_rules = [r for r in lease_rules if r.get("resourceNames")]
    assert [r["resourceNames"] for r in named_rules] == [[vocab.LEADER_LEASE_NAME]]
    assert [r["verbs"] for r in lease_rules if not r.get("resourceNames")] == [["create"]]


# --- settings reach the processes -----------------------------------------------------

#: values path → (component, variable, value set, value the process sees).
SETTINGS: list[tuple[str, str, str, Any, str]] = [
    ("logging.level", "webhook", "LOG_LEVEL", "DEBUG", "DEBUG"),
    ("logging.libraryLevel", "reconciler", "LIBRARY_LOG_LEVEL", "ERROR", "ERROR"),
    ("timezone", "reconciler", "TZ", "America/Los_Angeles", "America/Los_Angeles"),
    (
        "eventDisplayTimezone",
        "reconciler",
        "EVENT_DISPLAY_TIMEZONE",
        "Europe/Paris",
        "Europe/Paris",
    ),
    ("kubernetesApi.tlsStrictVerify", "reconciler", "K8S_TLS_STRICT_VERIFY", False, "false"),
    (
        "matching.requiredGroupLabel",
        "webhook",
        "REQUIRED_GROUP_LABEL",
        "dsmlp/course",
        "dsmlp/course",
    ),
    (
        "matching.requiredGroupLabel",
        "reconciler",
        "REQUIRED_GROUP_LABEL",
        "dsmlp/course",
        "dsmlp/course",
    ),
    ("matching.defaultUsageGroup", "webhook", "DEFAULT_USAGE_GROUP", "cse", "cse"),
    (
        "matching.defaultMinimumRuntimeSeconds",
        "reconciler",
        "DEFAULT_MINIMUM_RUNTIME_SECONDS",
        600,
        "600",
    ),
    (
        "matching.podSchedulingGateName",
        "webhook",
        "POD_SCHEDULING_GATE_NAME",
        "galends.io/wait",
        "galends.io/wait",
    ),
    ("matching.bestEffortEnabled", "webhook", "BEST_EFFORT_ENABLED", True, "true"),
    ("onDemand.leaseEnabled", "webhook", "ONDEMAND_LEASE_ENABLED", False, "false"),
    ("onDemand.horizonMinutes", "reconciler", "ONDEMAND_HORIZON_MINUTES", 45, "45"),
    ("onDemand.leaseBufferMinutes", "reconciler", "ONDEMAND_LEASE_BUFFER_MINUTES", 5, "5"),
    ("onDemand.delegateAdmission", "reconciler", "ONDEMAND_DELEGATE_ADMISSION", True, "true"),
    ("onDemand.overcommitFit", "reconciler", "ONDEMAND_OVERCOMMIT_FIT", False, "false"),
    ("onDemand.mergeEnabled", "reconciler", "ONDEMAND_MERGE_ENABLED", False, "false"),
    ("events.onDemandDenialEnabled", "reconciler", "ONDEMAND_DENIAL_EVENT_ENABLED", False, "false"),
    ("events.repeatMinutes", "reconciler", "ONDEMAND_DENIAL_EVENT_REPEAT_MINUTES", 0, "0"),
    ("events.onDemandPauseEnabled", "reconciler", "ONDEMAND_PAUSE_EVENT_ENABLED", False, "false"),
    ("events.podProblemEnabled", "reconciler", "POD_PROBLEM_EVENT_ENABLED", False, "false"),
    (
        "events.reservationWaitEnabled",
        "reconciler",
        "RESERVATION_WAIT_EVENT_ENABLED",
        False,
        "false",
    ),
    (
        "events.supportContact",
        "reconciler",
        "SUPPORT_CONTACT",
        "help@example.edu",
        "help@example.edu",
    ),
    (
        "reservationApi.url",
        "reconciler",
        "RESERVATION_API_URL",
        "https://r.example.org",
        "https://r.example.org",
    ),
    ("reservationApi.fetchIntervalSeconds", "reconciler", "RESERVATION_FETCH_INTERVAL", 60, "60"),
    ("reservationApi.lookaheadDays", "reconciler", "RESERVATION_LOOKAHEAD_DAYS", 3, "3"),
    ("noShow.timeoutMinutes", "reconciler", "NOSHOW_TIMEOUT_MINUTES", 20, "20"),
    ("noShow.graceMinutes", "reconciler", "NOSHOW_GRACE_MINUTES", 40, "40"),
    ("usage.retentionDays", "reconciler", "USAGE_RETENTION_DAYS", 3, "3"),
    ("usage.intervalSeconds", "reconciler", "USAGE_INTERVAL_SECONDS", 60, "60"),
    ("usage.checkpointSeconds", "reconciler", "USAGE_CHECKPOINT_SECONDS", 900, "900"),
    ("queue.processorIntervalSeconds", "reconciler", "QUEUE_PROCESSOR_INTERVAL", 120, "120"),
    ("preemption.leadMinutes", "reconciler", "PREEMPTION_LEAD_MINUTES", 10, "10"),
    ("preemption.checkIntervalSeconds", "reconciler", "PREEMPTION_CHECK_INTERVAL", 30, "30"),
    ("preemption.delegateSelection", "reconciler", "PREEMPTION_DELEGATE_SELECTION", False, "false"),
    ("preemption.evictionGraceSeconds", "reconciler", "EVICTION_GRACE_SECONDS", 300, "300"),
    ("capacity.checkIntervalSeconds", "reconciler", "CAPACITY_CHECK_INTERVAL", 1800, "1800"),
    ("adoption.enabled", "reconciler", "POD_ADOPTION_ENABLED", False, "false"),
    (
        "webhook.excludedNamespaces",
        "reconciler",
        "UNADMITTED_EXEMPT_NAMESPACES",
        ["monitoring"],
        f"monitoring,{render.NAMESPACE}",
    ),
    ("terminationWarning.enabled", "reconciler", "TERMINATION_WARNING_ENABLED", False, "false"),
    ("terminationWarning.leadMinutes", "reconciler", "TERMINATION_WARNING_LEAD_MINUTES", 60, "60"),
    ("headroom.targetPercent", "reconciler", "HEADROOM_TARGET_PERCENT", 10, "10"),
    ("headroom.noticeMinutes", "reconciler", "HEADROOM_NOTICE_MINUTES", 5, "5"),
    ("headroom.checkIntervalSeconds", "reconciler", "HEADROOM_CHECK_INTERVAL", 300, "300"),
    ("overstayReport.enabled", "reconciler", "OVERSTAY_REPORT_ENABLED", True, "true"),
    ("webhook.port", "webhook", "WEBHOOK_PORT", 9443, "9443"),
    ("webhook.healthPort", "webhook", "WEBHOOK_HEALTH_PORT", 9090, "9090"),
    ("webhook.tlsReloadSeconds", "webhook", "TLS_RELOAD_SECONDS", 5, "5"),
    ("webhook.maxBodyBytes", "webhook", "WEBHOOK_MAX_BODY_BYTES", 65536, "65536"),
    ("webhook.ledgerDeadlineMs", "webhook", "WEBHOOK_LEDGER_DEADLINE_MS", 1500, "1500"),
    (
        "webhook.gpuResourceWeights",
        "webhook",
        "GPU_RESOURCE_WEIGHTS",
        "nvidia.com/gpu=1,nvidia.com/mig-1g.10gb=1",
        "nvidia.com/gpu=1,nvidia.com/mig-1g.10gb=1",
    ),
    ("webhook.gpuResourcePrefixes", "webhook", "GPU_RESOURCE_PREFIXES", "amd.com/", "amd.com/"),
    ("webhook.tolerationPolicy", "webhook", "RESERVATION_TOLERATION_POLICY", "deny", "deny"),
    ("reconciler.httpPort", "reconciler", "HTTP_PORT", 9000, "9000"),
    ("reconciler.ledgerClaimTtlSeconds", "reconciler", "LEDGER_CLAIM_TTL_SECONDS", 60, "60"),
    ("reconciler.ledgerUnseenHoldSeconds", "reconciler", "LEDGER_UNSEEN_HOLD_SECONDS", 5, "5"),
    (
        "reconciler.leaderElection.leaseSeconds",
        "reconciler",
        "LEADER_ELECTION_LEASE_SECONDS",
        30,
        "30",
    ),
    (
        "reconciler.leaderElection.renewSeconds",
        "reconciler",
        "LEADER_ELECTION_RENEW_SECONDS",
        10,
        "10",
    ),
    ("selfSigned.renewBeforeDays", "certs", "CERTS_RENEW_BEFORE_DAYS", 20, "20"),
    ("selfSigned.validityDays", "certs", "CERTS_VALIDITY_DAYS", 90, "90"),
    ("selfSigned.caValidityDays", "certs", "CERTS_CA_VALIDITY_DAYS", 1000, "1000"),
    ("selfSigned.checkIntervalSeconds", "reconciler", "CERT_CHECK_INTERVAL", 600, "600"),
]


def _tree(path: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    node = out
    *parents, leaf = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return out


def _changed_values() -> dict[str, Any]:
    vals = render.values()
    for path, *_rest, value, _seen in SETTINGS:
        vals = render.merge(vals, _tree(path, value))
    return vals


def test_every_setting_reaches_its_process() -> None:
    docs = render.render(_changed_values())
    workload = {
        "webhook": one(docs, "Deployment", "webhook"),
        "reconciler": one(docs, "Deployment", "reconciler"),
        "certs": one(docs, "Job", "certs"),
    }
    wrong = [
        (path, variable, env(workload[component]).get(variable), seen)
        for path, component, variable, _value, seen in SETTINGS
        if env(workload[component]).get(variable) != seen
    ]
    assert wrong == []


def test_the_settings_table_covers_every_values_leaf_with_a_variable() -> None:
    """Every values.yaml comment naming a [VARIABLE] is exercised above."""
    text = (render.CHART / "values.yaml").read_text(encoding="utf-8")
    documented = set(re.findall(r"\[([A-Z][A-Z0-9_]+)\]", text))
    tested = {variable for _p, _c, variable, _v, _s in SETTINGS}
    secrets_and_switches = {"RESERVATION_API_KEY", "INBOUND_API_TOKEN", "LEADER_ELECTION_ENABLED"}
    assert documented - tested == secrets_and_switches


def test_the_api_key_and_token_come_from_secrets() -> None:
    reconciler = env(one(DEFAULT, "Deployment", "reconciler"))
    key_ref = {"name": "gpu-reservation-api-key", "key": "api-key"}
    assert reconciler["RESERVATION_API_KEY"] == {"secretKeyRef": key_ref}
    assert "INBOUND_API_TOKEN" not in reconciler
    with_token = env(one(render.render(CASES["token-secret"]), "Deployment", "reconciler"))
    assert with_token["INBOUND_API_TOKEN"] == {"secretKeyRef": {"name": "push-token", "key": "t"}}
    webhook = env(one(DEFAULT, "Deployment", "webhook"))
    assert not {"RESERVATION_API_KEY", "INBOUND_API_TOKEN"} & set(webhook)
    account = service_account_of(DEFAULT, "Deployment", "reconciler")
    assert webhook["CONTROLLER_SERVICE_ACCOUNTS"] == f"system:serviceaccount:{NS}:{account}"


# --- optional objects ----------------------------------------------------------------


def test_service_monitors_scrape_named_ports_of_both_services() -> None:
    docs = render.render(CASES["service-monitor"])
    assert not of_kind(DEFAULT, "ServiceMonitor")
    for component in ("webhook", "reconciler"):
        monitor = one(docs, "ServiceMonitor", component)
        service = one(docs, "Service", component)
        assert monitor["metadata"]["labels"]["release"] == "prom"
        assert (
            monitor["spec"]["selector"]["matchLabels"].items()
            <= service["metadata"]["labels"].items()
        )
        ports = {p["name"] for p in service["spec"]["ports"]}
        assert [e["port"] for e in monitor["spec"]["endpoints"]] == [
            next(p for p in sorted(ports) if p.startswith("http"))
        ]
        assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"


@pytest.mark.parametrize("case", ["network-policy", "network-policy-with-peers"])
def test_network_policies_admit_only_served_ports(case: str) -> None:
    docs = render.render(CASES[case])
    assert not of_kind(DEFAULT, "NetworkPolicy")
    for component in ("webhook", "reconciler"):
        policy = one(docs, "NetworkPolicy", component)
        deployment = one(docs, "Deployment", component)
        served = {p["name"] for p in container(deployment)["ports"]}
        ports = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
        assert ports == served
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    if case == "network-policy-with-peers":
        rules = one(docs, "NetworkPolicy", "webhook")["spec"]["ingress"]
        assert all("from" in rule for rule in rules)


# --- vocabulary ----------------------------------------------------------------------


def test_the_chart_vocabulary_is_shared_vocab() -> None:
    text = (render.CHART / "templates" / "_vocab.tpl").read_text(encoding="utf-8")
    defines = dict(re.findall(r'define "gpu-reservation\.vocab\.([A-Z_]+)" -}}(.*?){{- end', text))
    assert len(defines) >= 8
    assert {name: getattr(vocab, name, None) for name in defines} == defines


def test_rendered_values_use_the_vocabulary() -> None:
    groups = {g for role in of_kind(DEFAULT, "Role") for r in role["rules"] for g in r["apiGroups"]}
    assert vocab.CRD_GROUP in groups
    assert [c["metadata"]["name"] for c in render.crds()] == [vocab.CRD_NAME]
    assert render.crds()[0]["spec"]["group"] == vocab.CRD_GROUP
    text = render.notes(CASES["default"])
    assert f"{vocab.RESERVATION_TAINT_KEY}=<class>:{vocab.TAINT_EFFECT_NO_SCHEDULE}" in text


def test_large_integers_reach_the_webhook_as_integers() -> None:
    """YAML numbers are floats to Helm; a large one through ``quote`` alone renders in
    exponent form ("1.6777216e+07"), which the webhook refuses at start."""
    from webhook.settings import MAX_BODY_BYTES

    assert env(one(DEFAULT, "Deployment", "webhook"))["WEBHOOK_MAX_BODY_BYTES"] == str(
        MAX_BODY_BYTES
    )
    vals = render.values(webhook={"maxBodyBytes": 33554432})
    deployment = one(render.render(vals), "Deployment", "webhook")
    assert env(deployment)["WEBHOOK_MAX_BODY_BYTES"] == "33554432"
