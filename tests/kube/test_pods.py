"""Pod rules of the apiserver (facts §2, checklist 10–15, 32)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from sandbox.kube.admission_api import AdmissionAttributes, AdmissionResult
from shared import vocab
from tests.kube.conftest import Running, pod

PODS = "/api/v1/namespaces/{ns}/pods"
GPU_TOLERATION = {
    "key": vocab.GPU_CLASS_LABEL,
    "operator": "Exists",
    "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
}


def _create(api: httpx.Client, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    response = api.post(PODS.format(ns=ns), json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _patch(
    api: httpx.Client, ns: str, name: str, body: object, kind: str = "merge"
) -> httpx.Response:
    content_type = f"application/{kind}-patch+json"
    return api.patch(
        f"{PODS.format(ns=ns)}/{name}", json=body, headers={"Content-Type": content_type}
    )


def test_create_sets_pending_qos_and_gated_condition(api: httpx.Client, ns: str) -> None:
    """Rule: a created pod gets phase Pending, a qosClass and, when gated, "
    "PodScheduled=False/SchedulingGated."""
    created = _create(api, ns, pod("g", schedulingGates=[{"name": "example.com/wait"}]))
    status = created["status"]
    assert status["phase"] == "Pending"
    assert status["qosClass"] == "BestEffort"
    condition = status["conditions"][0]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "PodScheduled",
        "False",
        "SchedulingGated",
    )
    assert condition["message"] == "Scheduling is blocked due to non-empty scheduling gates"
    assert created["metadata"]["uid"]
    assert created["metadata"]["generation"] == 1


def test_qos_guaranteed_when_limits_equal_requests(api: httpx.Client, ns: str) -> None:
    """Rule: cpu and memory limits (requests default to them) make the pod Guaranteed."""
    body = pod()
    body["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}
    assert _create(api, ns, body)["status"]["qosClass"] == "Guaranteed"


def test_gpu_request_without_limit_is_invalid(api: httpx.Client, ns: str) -> None:
    """Rule: extended resources cannot be overcommitted: a request needs an equal limit."""
    body = pod()
    body["spec"]["containers"][0]["resources"] = {"requests": {vocab.GPU_RESOURCE: "1"}}
    response = api.post(PODS.format(ns=ns), json=body)
    assert response.status_code == 422
    assert "Limit must be set for non overcommitable resources" in response.json()["message"]


def test_adding_a_toleration_succeeds(api: httpx.Client, ns: str) -> None:
    """Rule: tolerations may be added to an existing pod."""
    created = _create(api, ns, pod())
    tolerations = [*created["spec"]["tolerations"], GPU_TOLERATION]
    response = _patch(api, ns, "p", {"spec": {"tolerations": tolerations}})
    assert response.status_code == 200, response.text
    assert GPU_TOLERATION in response.json()["spec"]["tolerations"]


def test_changing_a_toleration_is_forbidden(api: httpx.Client, ns: str) -> None:
    """Rule: an existing toleration may not change (except tolerationSeconds) → 422."""
    _create(api, ns, pod(tolerations=[GPU_TOLERATION]))
    changed = [{**GPU_TOLERATION, "operator": "Equal", "value": "h100"}]
    response = _patch(api, ns, "p", {"spec": {"tolerations": changed}})
    assert response.status_code == 422
    body = response.json()
    assert body["reason"] == "Invalid"
    assert body["message"] == (
        'Pod "p" is invalid: spec.tolerations: Forbidden: existing toleration can not be '
        "modified except its tolerationSeconds"
    )
    assert body["details"]["causes"][0] == {
        "reason": "FieldValueForbidden",
        "message": "Forbidden: existing toleration can not be modified except its "
        "tolerationSeconds",
        "field": "spec.tolerations",
    }


def test_toleration_seconds_may_change(api: httpx.Client, ns: str) -> None:
    """Rule: only tolerationSeconds of an existing toleration may change."""
    created = _create(api, ns, pod())
    tolerations = created["spec"]["tolerations"]
    tolerations[0]["tolerationSeconds"] = 10
    assert _patch(api, ns, "p", {"spec": {"tolerations": tolerations}}).status_code == 200


def test_adding_a_scheduling_gate_is_forbidden(api: httpx.Client, ns: str) -> None:
    """Rule: gates can only be removed after creation; a new one → 422 Invalid, cause
    FieldValueForbidden on ``spec.schedulingGates[i].name`` with the exact message; once the
    list is empty nothing can be re-added."""
    _create(api, ns, pod())
    response = _patch(api, ns, "p", {"spec": {"schedulingGates": [{"name": "example.com/late"}]}})
    assert response.status_code == 422
    body = response.json()
    assert body["reason"] == "Invalid"
    assert body["message"] == (
        'Pod "p" is invalid: spec.schedulingGates[0].name: Forbidden: only deletion is allowed, '
        "but found new scheduling gate 'example.com/late'"
    )
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: only deletion is allowed, but found new scheduling gate "
            "'example.com/late'",
            "field": "spec.schedulingGates[0].name",
        }
    ]
    _create(api, ns, pod("g", schedulingGates=[{"name": "example.com/a"}]))
    assert _patch(api, ns, "g", {"spec": {"schedulingGates": None}}).status_code == 200
    again = _patch(api, ns, "g", {"spec": {"schedulingGates": [{"name": "example.com/a"}]}})
    assert again.status_code == 422
    assert again.json()["details"]["causes"][0]["field"] == "spec.schedulingGates[0].name"


def test_removing_a_gate_with_strategic_delete_succeeds(api: httpx.Client, ns: str) -> None:
    """Rule: gates merge by name in a strategic patch; ``$patch: delete`` removes one."""
    gates = [{"name": "example.com/a"}, {"name": "example.com/b"}]
    _create(api, ns, pod(schedulingGates=gates))
    patch = {"spec": {"schedulingGates": [{"name": "example.com/a", "$patch": "delete"}]}}
    response = _patch(api, ns, "p", patch, "strategic-merge")
    assert response.status_code == 200, response.text
    assert response.json()["spec"]["schedulingGates"] == [{"name": "example.com/b"}]


def test_node_selector_narrowing_allowed_only_while_gated(api: httpx.Client, ns: str) -> None:
    """Rule: nodeSelector may gain keys while gated; changing a key is 422 on spec.nodeSelector;
    on an ungated pod any nodeSelector edit is the generic ``spec: Forbidden: pod updates may not
    change fields other than ...``."""
    _create(api, ns, pod("g", schedulingGates=[{"name": "example.com/a"}], nodeSelector={"a": "1"}))
    assert _patch(api, ns, "g", {"spec": {"nodeSelector": {"b": "2"}}}).status_code == 200
    changed = _patch(api, ns, "g", {"spec": {"nodeSelector": {"a": "9"}}})
    assert changed.status_code == 422
    cause = changed.json()["details"]["causes"][0]
    assert cause["field"] == "spec.nodeSelector"
    assert cause["message"].endswith(
        "only additions to spec.nodeSelector are allowed (no mutations or deletions)"
    )
    removed = _patch(api, ns, "g", {"spec": {"nodeSelector": {"a": None}}})
    assert removed.status_code == 422
    _create(api, ns, pod("u"))
    ungated = _patch(api, ns, "u", {"spec": {"nodeSelector": {"b": "2"}}})
    assert ungated.status_code == 422
    assert ungated.json()["message"].startswith(
        'Pod "u" is invalid: spec: Forbidden: pod updates may not change fields other than '
    )
    assert ungated.json()["details"]["causes"][0]["reason"] == "FieldValueForbidden"


def test_active_deadline_seconds_may_only_be_lowered(api: httpx.Client, ns: str) -> None:
    """Rule: activeDeadlineSeconds may be set or lowered, never raised or removed."""
    _create(api, ns, pod("unset"))
    assert _patch(api, ns, "unset", {"spec": {"activeDeadlineSeconds": 100}}).status_code == 200
    assert _patch(api, ns, "unset", {"spec": {"activeDeadlineSeconds": 50}}).status_code == 200
    raised = _patch(api, ns, "unset", {"spec": {"activeDeadlineSeconds": 500}})
    assert raised.status_code == 422
    assert raised.json()["details"]["causes"][0]["field"] == "spec.activeDeadlineSeconds"
    assert raised.json()["message"].endswith("must be less than or equal to previous value")
    removed = _patch(api, ns, "unset", {"spec": {"activeDeadlineSeconds": None}})
    assert removed.status_code == 422
    assert removed.json()["message"].endswith(
        "must not update from a positive integer to nil value"
    )


def test_required_affinity_terms_only_grow_while_gated(api: httpx.Client, ns: str) -> None:
    """Rule: while gated, each required node affinity term may only get appended expressions
    (an absent requirement may be set freely); an ungated pod's affinity is immutable."""
    expr = {"key": "a", "operator": "In", "values": ["1"]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expr]}]
            }
        }
    }
    _create(api, ns, pod(schedulingGates=[{"name": "example.com/a"}], affinity=affinity))
    more = {"key": "b", "operator": "Exists"}
    grown = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expr, more]}]
            }
        }
    }
    assert _patch(api, ns, "p", {"spec": {"affinity": grown}}).status_code == 200
    replaced = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [more]}]
            }
        }
    }
    refused = _patch(api, ns, "p", {"spec": {"affinity": replaced}})
    assert (refused.status_code, refused.json()["reason"]) == (422, "Invalid")
    _create(api, ns, pod("free", schedulingGates=[{"name": "example.com/a"}]))
    assert _patch(api, ns, "free", {"spec": {"affinity": affinity}}).status_code == 200
    _create(api, ns, pod("ungated"))
    assert _patch(api, ns, "ungated", {"spec": {"affinity": affinity}}).status_code == 422


def test_image_change_allowed_other_spec_changes_forbidden(api: httpx.Client, ns: str) -> None:
    """Rule: container images are mutable; e.g. restartPolicy is not."""
    created = _create(api, ns, pod())
    created["spec"]["containers"][0]["image"] = "busybox:1.37"
    assert api.put(f"{PODS.format(ns=ns)}/p", json=created).status_code == 200
    assert _patch(api, ns, "p", {"spec": {"restartPolicy": "Never"}}).status_code == 422


def test_status_on_main_resource_is_ignored(api: httpx.Client, ns: str) -> None:
    """Rule: status sent to the pod itself is replaced by the stored status; /status writes it."""
    _create(api, ns, pod())
    main = _patch(api, ns, "p", {"status": {"phase": "Running"}})
    assert main.status_code == 200
    assert main.json()["status"]["phase"] == "Pending"
    response = api.patch(
        f"{PODS.format(ns=ns)}/p/status",
        json={"status": {"phase": "Running"}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.json()["status"]["phase"] == "Running"


def test_status_write_cannot_change_spec(api: httpx.Client, ns: str) -> None:
    """Rule: a /status write keeps the stored spec."""
    _create(api, ns, pod())
    response = api.patch(
        f"{PODS.format(ns=ns)}/p/status",
        json={"spec": {"restartPolicy": "Never"}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.json()["spec"]["restartPolicy"] == "Always"


def test_nodename_with_gates_at_create_is_forbidden(api: httpx.Client, ns: str) -> None:
    """Rule: spec.nodeName and scheduling gates together are refused at create."""
    response = api.post(
        PODS.format(ns=ns), json=pod(nodeName="n1", schedulingGates=[{"name": "example.com/a"}])
    )
    assert response.status_code == 422
    assert "cannot be set until all schedulingGates have been cleared" in response.json()["message"]


def _bind(api: httpx.Client, ns: str, name: str, node: str = "n1") -> httpx.Response:
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name},
        "target": {"kind": "Node", "name": node},
    }
    return api.post(f"{PODS.format(ns=ns)}/{name}/binding", json=body)


def test_binding_sets_node_name_and_scheduled_condition(api: httpx.Client, ns: str) -> None:
    """Rule: pods/binding sets spec.nodeName and PodScheduled=True; answers 201 Success."""
    _create(api, ns, pod())
    response = _bind(api, ns, "p")
    assert response.status_code == 201
    assert response.json()["status"] == "Success"
    bound = api.get(f"{PODS.format(ns=ns)}/p").json()
    assert bound["spec"]["nodeName"] == "n1"
    assert {"type": "PodScheduled", "status": "True"}.items() <= bound["status"]["conditions"][
        0
    ].items()


def test_binding_refused_for_gated_bound_and_terminating_pods(api: httpx.Client, ns: str) -> None:
    """Rule: binding a gated, an already bound or a terminating pod is a 409 Conflict; the gated
    case says ``pod <n> has non-empty .spec.schedulingGates``."""
    _create(api, ns, pod("g", schedulingGates=[{"name": "example.com/a"}]))
    gated = _bind(api, ns, "g")
    assert gated.status_code == 409
    assert gated.json()["reason"] == "Conflict"
    assert gated.json()["message"] == (
        'Operation cannot be fulfilled on pods/binding "g": pod g has non-empty '
        ".spec.schedulingGates"
    )
    _create(api, ns, pod("b"))
    assert _bind(api, ns, "b").status_code == 201
    rebound = _bind(api, ns, "b", "other")
    assert (rebound.status_code, rebound.json()["reason"]) == (409, "Conflict")
    assert api.get(f"{PODS.format(ns=ns)}/b").json()["spec"]["nodeName"] == "n1"
    api.delete(f"{PODS.format(ns=ns)}/b")
    _create(api, ns, pod("c"))
    api.patch(
        f"{PODS.format(ns=ns)}/c",
        json={"metadata": {"finalizers": ["example.com/keep"]}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    api.delete(f"{PODS.format(ns=ns)}/c")
    terminating = _bind(api, ns, "c")
    assert (terminating.status_code, terminating.json()["reason"]) == (409, "Conflict")
    assert not api.get(f"{PODS.format(ns=ns)}/c").json()["spec"].get("nodeName")


def test_graceful_delete_of_bound_pod_keeps_it_terminating(api: httpx.Client, ns: str) -> None:
    """Rule: deleting a bound pod sets deletionTimestamp and grace (terminationGracePeriodSeconds,
    default 30); a repeat with a longer grace changes nothing, a shorter one lowers it; grace 0
    removes it."""
    _create(api, ns, pod())
    _bind(api, ns, "p")
    first = api.delete(f"{PODS.format(ns=ns)}/p")
    assert first.status_code == 200
    meta = first.json()["metadata"]
    assert meta["deletionTimestamp"]
    assert meta["deletionGracePeriodSeconds"] == 30
    assert api.get(f"{PODS.format(ns=ns)}/p").status_code == 200
    longer = api.delete(f"{PODS.format(ns=ns)}/p", params={"gracePeriodSeconds": "60"}).json()
    assert longer["metadata"]["deletionGracePeriodSeconds"] == 30
    assert longer["metadata"]["deletionTimestamp"] == meta["deletionTimestamp"]
    shorter = api.delete(f"{PODS.format(ns=ns)}/p", params={"gracePeriodSeconds": "5"}).json()
    assert shorter["metadata"]["deletionGracePeriodSeconds"] == 5
    assert shorter["metadata"]["deletionTimestamp"] <= meta["deletionTimestamp"]
    api.request(
        "DELETE",
        f"{PODS.format(ns=ns)}/p",
        json={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
    )
    assert api.get(f"{PODS.format(ns=ns)}/p").status_code == 404


def test_finished_pod_is_deleted_at_once(api: httpx.Client, ns: str) -> None:
    """Rule: a bound pod in phase Succeeded/Failed is deleted immediately (grace forced to 0)."""
    _create(api, ns, pod())
    _bind(api, ns, "p")
    api.patch(
        f"{PODS.format(ns=ns)}/p/status",
        json={"status": {"phase": "Succeeded"}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert api.delete(f"{PODS.format(ns=ns)}/p").status_code == 200
    assert api.get(f"{PODS.format(ns=ns)}/p").status_code == 404


def test_unbound_pod_is_deleted_at_once(api: httpx.Client, ns: str) -> None:
    """Rule: a pod with no nodeName is deleted immediately (grace forced to 0); the DELETE answers
    with the pod object itself (not a Status)."""
    created = _create(api, ns, pod())
    answer = api.delete(f"{PODS.format(ns=ns)}/p")
    assert answer.status_code == 200
    assert (answer.json()["kind"], answer.json()["apiVersion"]) == ("Pod", "v1")
    assert answer.json()["metadata"]["uid"] == created["metadata"]["uid"]
    assert api.get(f"{PODS.format(ns=ns)}/p").status_code == 404


def test_eviction_deletes_the_pod(api: httpx.Client, ns: str) -> None:
    """Rule: POST pods/<name>/eviction deletes the pod (201 Success)."""
    _create(api, ns, pod())
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}}
    assert api.post(f"{PODS.format(ns=ns)}/p/eviction", json=body).status_code == 201
    assert api.get(f"{PODS.format(ns=ns)}/p").status_code == 404


def test_in_process_read(kube: Running, api: httpx.Client, ns: str) -> None:
    """The server object exposes stored objects to tests."""
    _create(api, ns, pod())
    from shared.resources import PODS as PODS_RESOURCE

    stored = kube.call(lambda: kube.server.get_object(PODS_RESOURCE, "p", ns))
    assert stored is not None
    assert stored["status"]["phase"] == "Pending"


class _HoldBindings:
    """Admission that holds every ``pods/binding`` until two have arrived (a slow webhook
    on the binding path), then lets both go on."""

    def __init__(self) -> None:
        self.arrived = 0
        self.both: asyncio.Event | None = None

    async def admit(self, attrs: AdmissionAttributes) -> AdmissionResult:
        if attrs.subresource == "binding":
            self.both = self.both or asyncio.Event()
            self.arrived += 1
            if self.arrived >= 2:
                self.both.set()
            await asyncio.wait_for(self.both.wait(), 10)
        return AdmissionResult(attrs.object, [])


def _bind_as_new_client(kube: Running, ns: str, node: str) -> httpx.Response:
    with kube.client() as client:
        return _bind(client, ns, "twice", node)


def test_two_bindings_in_flight_bind_once(kube: Running, api: httpx.Client, ns: str) -> None:
    """Rule: a second binding of a pod is a 409 ``pod <n> is already assigned to node
    "<node>"`` even when both passed admission while the pod was unbound (a slow webhook
    held both): the decision reads the pod as stored after admission."""
    _create(api, ns, pod("twice"))
    plugin = _HoldBindings()
    kube.server.mutating_admission.append(plugin)
    try:
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda node: _bind_as_new_client(kube, ns, node), ["n1", "n2"]))
    finally:
        kube.server.mutating_admission.remove(plugin)
    codes = sorted(a.status_code for a in answers)
    assert codes == [201, 409]
    refused = next(a for a in answers if a.status_code == 409).json()
    node = api.get(f"{PODS.format(ns=ns)}/twice").json()["spec"]["nodeName"]
    assert refused["message"] == (
        f'Operation cannot be fulfilled on pods/binding "twice": pod twice is already '
        f'assigned to node "{node}"'
    )


def test_binding_preconditions_are_checked(api: httpx.Client, ns: str) -> None:
    """Rule: a Binding naming another uid or an old resourceVersion of the pod is a 409."""
    made = _create(api, ns, pod("pre"))
    body = {"metadata": {"name": "pre", "uid": "not-the-uid"}, "target": {"name": "n1"}}
    wrong_uid = api.post(f"{PODS.format(ns=ns)}/pre/binding", json=body)
    assert (wrong_uid.status_code, wrong_uid.json()["reason"]) == (409, "Conflict")
    assert "Precondition failed: UID in precondition: not-the-uid" in wrong_uid.json()["message"]
    body["metadata"] = {"name": "pre", "resourceVersion": "1"}
    old_rv = api.post(f"{PODS.format(ns=ns)}/pre/binding", json=body)
    assert (old_rv.status_code, old_rv.json()["reason"]) == (409, "Conflict")
    body["metadata"] = {"name": "pre", "uid": made["metadata"]["uid"]}
    assert api.post(f"{PODS.format(ns=ns)}/pre/binding", json=body).status_code == 201


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "readinessProbe",
            {"periodSeconds": 1},
            "spec.containers[0].readinessProbe: Required value: must specify a handler type",
        ),
        (
            "livenessProbe",
            {"httpGet": {"port": 80}, "tcpSocket": {"port": 80}},
            "spec.containers[0].livenessProbe.tcpSocket: Forbidden: may not specify more than 1 "
            "handler type",
        ),
        (
            "livenessProbe",
            {"tcpSocket": {"port": 80}, "successThreshold": 2},
            "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1",
        ),
        (
            "env",
            [{"name": "X", "valueFrom": {}}],
            'spec.containers[0].env[0].valueFrom: Invalid value: "": must specify one of:',
        ),
        (
            "env",
            [
                {
                    "name": "X",
                    "valueFrom": {
                        "fieldRef": {"fieldPath": "metadata.name"},
                        "secretKeyRef": {"name": "s", "key": "k"},
                    },
                }
            ],
            "may not have more than one field specified at a time",
        ),
        (
            "volumeMounts",
            [{"name": "nosuch", "mountPath": "/x"}],
            'spec.containers[0].volumeMounts[0].name: Not found: "nosuch"',
        ),
    ],
    ids=["no-handler", "two-handlers", "liveness-success", "no-source", "two-sources", "no-volume"],
)
def test_malformed_probes_env_sources_and_mounts_are_invalid(
    api: httpx.Client, ns: str, field: str, value: Any, message: str
) -> None:
    """Rule: a probe names one handler, a valueFrom one source, a mount a pod volume."""
    body = pod()
    body["spec"]["containers"][0][field] = value
    response = api.post(PODS.format(ns=ns), json=body)
    assert response.status_code == 422, response.text
    assert message in response.json()["message"]


def test_a_readiness_probe_may_need_several_successes(api: httpx.Client, ns: str) -> None:
    """Rule: only a readiness probe's successThreshold may exceed 1."""
    body = pod()
    probe = {"tcpSocket": {"port": 80}, "successThreshold": 3}
    body["spec"]["containers"][0]["readinessProbe"] = probe
    body["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    body["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    _create(api, ns, body)
