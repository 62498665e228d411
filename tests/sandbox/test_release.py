"""A release as Helm makes one: install order, hooks, the record, the three-way write."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox import release as rel
from sandbox.apply import covers, dropped, hook_verdict, merged_body, rolled_out, three_way
from sandbox.values import Layers
from shared import vocab

RELEASE = rel.RELEASE_NAME

NS = RELEASE


def chart(**values: Any) -> rel.Rendered:
    return rel.render(Layers({"reservationApi": {"url": "http://app"}, **values}), NS)


def test_objects_come_in_helms_install_order_and_unknown_kinds_last() -> None:
    kinds = [m.kind for m in chart(serviceMonitor={"enabled": True}).manifests]
    first = {kind: kinds.index(kind) for kind in kinds}
    assert first["PodDisruptionBudget"] < first["ServiceAccount"] < first["ClusterRole"]
    assert first["Role"] < first["RoleBinding"] < first["Service"] < first["Deployment"]
    assert first["Deployment"] < first["MutatingWebhookConfiguration"]
    assert kinds[-1] == "ServiceMonitor"  # not in InstallOrder: after every known kind
    assert rel.kind_rank("Zeta") > rel.kind_rank("Alpha") > rel.kind_rank("Deployment")


def test_the_certs_job_is_a_post_install_and_upgrade_hook_not_a_manifest() -> None:
    rendered = chart()
    assert "Job" not in {m.kind for m in rendered.manifests}
    (job,) = rendered.hooks_for("post-install")
    assert job.manifest.kind == "Job"
    assert rendered.hooks_for("post-upgrade") == [job]
    assert job.delete_policies == {rel.BEFORE_HOOK_CREATION, rel.HOOK_SUCCEEDED}
    assert rendered.hooks_for("pre-install") == []
    assert chart(certManager={"enabled": True}).hooks == []


def _hook(name: str, kind: str, notes: dict[str, str]) -> rel.Manifest:
    meta = {"name": name, "annotations": {rel.HOOK: "pre-install", **notes}}
    return rel.Manifest("t.yaml", {"apiVersion": "v1", "kind": kind, "metadata": meta})


def test_hooks_run_by_weight_then_kind_then_name_and_default_to_before_creation() -> None:
    every = [
        _hook("b", "Job", {rel.HOOK_WEIGHT: "1"}),
        _hook("a", "Job", {rel.HOOK_WEIGHT: "1"}),
        _hook("z", "ServiceAccount", {rel.HOOK_WEIGHT: "1"}),
        _hook("late", "Job", {rel.HOOK_WEIGHT: "not-a-number"}),
        _hook("early", "Pod", {rel.HOOK_WEIGHT: "-5"}),
    ]
    texts = {"t.yaml": "\n---\n".join(__import__("json").dumps(m.obj) for m in every)}
    rendered = rel.sort(texts, [], {})
    order = [h.manifest.name for h in rendered.hooks_for("pre-install")]
    assert order == ["early", "late", "z", "a", "b"]
    assert all(h.delete_policies == {rel.BEFORE_HOOK_CREATION} for h in rendered.hooks)


def test_a_bad_value_is_refused_with_helms_message() -> None:
    with pytest.raises(rel.RenderError, match="maxBodyBytes"):
        chart(webhook={"maxBodyBytes": "big"})
    with pytest.raises(rel.RenderError, match=r"reservationApi\.url is required"):
        rel.render(Layers(), NS)
    with pytest.raises(rel.RenderError, match="failed parsing --set"):
        rel.render(Layers({}, {}, (), ("a.b",)), NS)


def test_the_record_round_trips_through_its_secret() -> None:
    rendered = chart()
    layers = Layers({"a": 1}, {"b": 2}, ({"c": 3},), ("d=4",))
    record = rel.Record(2, rel.DEPLOYED, layers, rendered.manifests, rendered.values)
    secret = rel.record_secret(record, NS, "2026-12-05T00:00:00Z")
    assert secret["metadata"]["name"] == "sh.helm.release.v1.gpu-reservation.v2"
    assert secret["type"] == "helm.sh/release.v1"
    assert secret["metadata"]["labels"] == {
        "name": RELEASE,
        "owner": "helm",
        "status": "deployed",
        "version": "2",
    }
    back = rel.from_secret(secret)
    assert (back.version, back.layers, back.values) == (2, layers, rendered.values)
    assert [m.obj for m in back.manifest] == [m.obj for m in rendered.manifests]
    assert [m.path for m in back.manifest] == [m.path for m in rendered.manifests]
    with pytest.raises(ValueError, match="not a release record"):
        rel.from_secret({"data": {"release": "bm90IGd6aXA="}})


def test_the_latest_record_is_the_highest_version() -> None:
    secrets = [
        {"metadata": {"labels": {"owner": "helm", "version": v}}} for v in ("2", "10", "9")
    ] + [{"metadata": {"labels": {"version": "99"}}}]
    newest = rel.latest(secrets)
    assert newest is not None
    assert newest["metadata"]["labels"]["version"] == "10"


# --- the three-way write --------------------------------------------------------------


def test_three_way_sets_new_fields_drops_old_ones_and_keeps_what_nobody_rendered() -> None:
    previous = {"spec": {"a": 1, "gone": 1}}
    wanted = {"spec": {"a": 2, "new": [1]}}
    live = {"spec": {"a": 1, "gone": 1, "clusterIP": "10.0.0.1"}, "status": {"x": 1}}
    assert three_way(previous, wanted, live) == {
        "spec": {"a": 2, "new": [1], "clusterIP": "10.0.0.1"},
        "status": {"x": 1},
    }
    assert dropped(previous, {"spec": {"a": 1}}, live)
    assert not dropped(previous, previous, live)
    assert covers({"spec": {"a": 1}}, live)
    assert not covers(wanted, live)


def test_an_upgraded_webhook_configuration_keeps_each_webhooks_ca_bundle() -> None:
    service: dict[str, Any] = {"service": {"name": "s"}}
    hook: dict[str, Any] = {"name": "h", "clientConfig": service, "timeoutSeconds": 3}
    wanted = {
        "kind": "MutatingWebhookConfiguration",
        "metadata": {},
        "webhooks": [{**hook, "timeoutSeconds": 5}],
    }
    live = {
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"resourceVersion": "7"},
        "webhooks": [{**hook, "clientConfig": {**service, "caBundle": "Q0E="}}],
    }
    body = merged_body(wanted, wanted, live)
    assert body["webhooks"][0]["clientConfig"]["caBundle"] == "Q0E="
    assert body["webhooks"][0]["timeoutSeconds"] == 5
    assert body["metadata"]["resourceVersion"] == "7"


@pytest.mark.parametrize(
    ("obj", "verdict"),
    [
        ({"kind": "Job", "status": {}}, False),
        ({"kind": "Job", "status": {"conditions": [{"type": "Complete", "status": "True"}]}}, True),
        (
            {
                "kind": "Job",
                "status": {
                    "conditions": [
                        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
                    ]
                },
            },
            "BackoffLimitExceeded",
        ),
        (
            {"kind": "Job", "status": {"conditions": [{"type": "Complete", "status": "False"}]}},
            False,
        ),
        ({"kind": "Pod", "status": {"phase": "Running"}}, False),
        ({"kind": "Pod", "status": {"phase": "Succeeded"}}, True),
        ({"kind": "Pod", "status": {"phase": "Failed"}}, "pod Failed"),
    ],
    ids=[
        "job-running",
        "job-complete",
        "job-failed",
        "job-not-complete",
        "pod-running",
        "pod-succeeded",
        "pod-failed",
    ],
)
def test_a_hook_is_done_when_its_job_completes_or_its_pod_succeeds(
    obj: dict[str, Any], verdict: bool | str
) -> None:
    assert hook_verdict(obj) == verdict


def test_a_rollout_is_done_when_every_replica_is_updated_and_available() -> None:
    meta = {"generation": 2}
    done = {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 3}
    assert rolled_out({"metadata": meta, "spec": {"replicas": 3}, "status": done})
    for field, value in [
        ("observedGeneration", 1),
        ("updatedReplicas", 2),
        ("availableReplicas", 2),
        ("replicas", 4),
    ]:
        status = {**done, field: value}
        assert not rolled_out({"metadata": meta, "spec": {"replicas": 3}, "status": status})


# --- the sandbox's layers and its rollout wait ------------------------------------------


def test_the_computed_layer_holds_the_app_url_and_only_a_changed_gate(tmp_path: Any) -> None:
    from sandbox.release_component import NO_APP_URL, computed
    from sandbox.runner import SandboxContext
    from sandbox.values import sandbox_values

    own = sandbox_values()
    ctx = SandboxContext(state_dir=tmp_path, scenario={})
    assert computed(ctx, own) == {"reservationApi": {"url": NO_APP_URL}}
    ctx.endpoints["app"] = "http://127.0.0.1:5"
    ctx.scheduling_gate = None
    assert computed(ctx, own) == {
        "reservationApi": {"url": "http://127.0.0.1:5"},
        "matching": {"podSchedulingGateName": ""},
    }
    gate = own["matching"]["podSchedulingGateName"]
    assert gate == vocab.SANDBOX_SCHEDULING_GATE
    tolerations = {t["key"] for t in own["webhook"]["tolerations"]}
    assert tolerations == {vocab.SANDBOX_SYSTEM_TAINT}


def test_a_pod_stuck_as_a_cluster_shows_it_ends_the_wait() -> None:
    from sandbox.release_component import stuck

    def pod(name: str, state: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": name}, "status": {"containerStatuses": [{"state": state}]}}

    pods = [
        pod("a", {"waiting": {"reason": "CrashLoopBackOff"}}),
        pod("b", {"waiting": {"reason": "ContainerCreating"}}),
        pod("c", {"running": {}}),
        pod("d", {"waiting": {"reason": "CreateContainerConfigError"}}),
        {"metadata": {"name": "e"}, "status": {}},
    ]
    assert stuck(pods) == ["a: CrashLoopBackOff", "d: CreateContainerConfigError"]
