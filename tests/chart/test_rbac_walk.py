"""Acceptance 4: the chart's RBAC for each component is exactly what its code calls.

The walker (``tests/chart/rbac_walk.py``) reads every Kubernetes call from the code as
it is at test time; the chart must grant each component those verbs on those
resources — nothing missing, nothing extra. When this fails after a code change, edit
the component's RBAC template (and its rule in docs/operator/install.md).
"""

from __future__ import annotations

import pytest

from shared import resources
from tests.chart import render
from tests.chart.cases import CASES
from tests.chart.rbac_walk import (
    COMPONENTS,
    Permission,
    bound_roles,
    calls_in,
    granted,
    mismatch,
    modules_of,
    service_account_of,
    walk,
)

WALK = walk()
WORKLOAD = {"webhook": "Deployment", "reconciler": "Deployment", "certs": "Job"}


def test_every_gateway_call_is_readable() -> None:
    assert WALK.unresolved == []


@pytest.mark.parametrize("component", COMPONENTS)
def test_rbac_grants_exactly_the_calls_the_code_makes(component: str) -> None:
    docs = render.render(CASES["default"])
    account = service_account_of(docs, WORKLOAD[component], component)
    given = granted(bound_roles(docs, render.NAMESPACE, account))
    assert WALK.permissions(component), f"the walker found no call for {component}"
    assert mismatch(WALK.permissions(component), given) == {}


def through_certs(component: str) -> set[Permission]:
    """Permissions charged to ``component`` only through the ``certs`` package (the
    reconciler's certificate check, which runs in self-signed mode only)."""
    calls = WALK.of(component)
    via = {c.permission for c in calls if c.module.split(".")[0] == "certs"}
    return via - {c.permission for c in calls if c.module.split(".")[0] != "certs"}


def test_rbac_is_the_same_in_cert_manager_mode_minus_the_certs_job() -> None:
    """With cert-manager the certs Job and the reconciler's certificate check are off:
    the reconciler is granted its calls minus those it makes through ``certs``."""
    docs = render.render(CASES["cert-manager"])
    for component in ("webhook", "reconciler"):
        account = service_account_of(docs, "Deployment", component)
        given = granted(bound_roles(docs, render.NAMESPACE, account))
        needed = WALK.permissions(component) - through_certs(component)
        assert mismatch(needed, given) == {}
    assert not [d for d in docs if d["metadata"]["name"].endswith("-certs")]


def test_the_reconciler_checks_certificates_with_the_certs_jobs_permissions() -> None:
    """Self-signed mode adds exactly ``certs.apply``'s calls to the reconciler: the
    reconciler imports it (``reconciler.rotation``), so the walk charges them to it."""
    assert "certs.apply" in modules_of("reconciler")
    assert "certs.apply" not in modules_of("webhook")
    assert through_certs("reconciler") == WALK.permissions("certs")
    self_signed = render.render(CASES["default"])
    cert_manager = render.render(CASES["cert-manager"])
    grants = [
        granted(bound_roles(d, render.NAMESPACE, service_account_of(d, "Deployment", "reconciler")))
        for d in (self_signed, cert_manager)
    ]
    assert grants[0] - grants[1] == through_certs("reconciler")


def test_shared_code_is_charged_to_the_components_that_import_it() -> None:
    assert "shared.ledger" in modules_of("webhook")
    assert "shared.gateway" in modules_of("certs")
    assert not {m for m in modules_of("webhook") if m.startswith("reconciler")}
    ledger = {c.permission for c in WALK.calls["shared.ledger"]}
    assert ledger <= WALK.permissions("webhook")


SOURCE = """
from shared import resources
from shared.resources import PODS, SECRETS as S

async def f(gateway, kube, ns, res, sub):
    await gateway.list_all(PODS, label_selector="x")
    await kube.replace(S, "n", {}, ns)
    await gateway.replace(resources.GPU_RESERVATIONS, "n", {}, ns, "status")
    await gateway.patch(PODS, "n", [], ns, subresource="status")
    await gateway.delete(res, "n")
    await gateway.get(PODS, "n", ns, subresource=sub) if False else None
    await gateway.request("GET", "/api")
    {}.get("key")
"""


def test_the_walker_reads_positional_keyword_and_module_forms() -> None:
    found, unresolved = calls_in(SOURCE, "m")
    assert [c.permission for c in found] == [
        ("list", "", "pods"),
        ("update", "", "secrets"),
        ("update", resources.GPU_RESERVATIONS.group, f"{resources.GPU_RESERVATIONS.plural}/status"),
        ("patch", "", "pods/status"),
    ]
    assert sorted(u.line for u in unresolved) == [10, 11, 12]


def test_calls_found_are_reported() -> None:
    """The calls per component, printed for the record (pytest -s)."""
    for component in COMPONENTS:
        lines = sorted({f"{c.verb} {c.resource}" for c in WALK.of(component)})
        print(component, lines)
        assert lines
