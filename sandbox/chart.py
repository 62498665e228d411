"""The chart's objects, as the sandbox installs them: one source, so the two cannot drift.

The sandbox runs the real webhook and reconciler under their own service-account
tokens, with the RBAC the chart grants, behind the webhook configuration the chart
renders. Rather than keeping copies, it renders the chart here with Helm's own engine
(``helm-python-sdk``, as the chart tests do) and installs what comes out: the CRD from
``crds/``, each component's ServiceAccount, Roles and bindings, the webhook Service and
the MutatingWebhookConfiguration. Only two things differ from a cluster, and they are
the sandbox's to add: the ``caBundle`` (``with_ca_bundle``) and the Endpoints behind
the Service (the sandbox's loopback ports).

``tests/chart/test_sandbox_chart.py`` proves that what this module returns equals what
the chart renders.
"""

from __future__ import annotations

import base64
import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

from shared import vocab

Obj = dict[str, Any]

CHART_DIR = Path(__file__).resolve().parents[1] / "charts" / vocab.PRODUCT_NAME
#: The release name the sandbox renders as (so object names are the chart defaults).
RELEASE = vocab.PRODUCT_NAME
#: The sandbox's values: the app URL is a placeholder (the reconciler's real one comes
#: from its environment); everything else is the chart's default.
SANDBOX_VALUES: dict[str, Any] = {"reservationApi": {"url": "http://127.0.0.1"}}
#: Kinds that make up a component's permissions.
RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
COMPONENT_LABEL = "app.kubernetes.io/component"
#: The chart's components; ``certs`` exists in self-signed mode only.
COMPONENTS = ("webhook", "reconciler", "certs")
#: The chart's read access for users (``userAccess``): RBAC without a ServiceAccount.
USER_ACCESS = "users"


@dataclass(frozen=True)
class ChartObjects:
    """What the sandbox installs from the chart."""

    #: The CustomResourceDefinitions of ``crds/``.
    crds: list[Obj]
    #: Component → its ServiceAccount, Roles, ClusterRoles and their bindings.
    rbac: dict[str, list[Obj]]
    #: Component → the name of its ServiceAccount.
    service_accounts: dict[str, str]
    #: The webhook's Service (the sandbox adds the Endpoints).
    webhook_service: Obj
    #: The MutatingWebhookConfiguration without a caBundle (see ``with_ca_bundle``).
    webhook_configuration: Obj
    namespace: str = field(default="")
    #: The serving Secret the webhook Deployment mounts (its ``tls.crt``/``tls.key``).
    webhook_secret: str = field(default="")
    #: The literal environment of the self-signed hook Job (``python -m certs ensure``);
    #: empty in cert-manager mode.
    certs_environment: dict[str, str] = field(default_factory=dict)

    def rbac_objects(self) -> list[Obj]:
        """Every component's ServiceAccount, Roles and bindings."""
        return [
            obj for component in (*COMPONENTS, USER_ACCESS) for obj in self.rbac.get(component, [])
        ]

    def install_order(self) -> list[Obj]:
        """Everything, in the order to create it (CRDs and RBAC before their users)."""
        rbac = self.rbac_objects()
        return [*self.crds, *rbac, self.webhook_service, self.webhook_configuration]


def render(namespace: str, values: dict[str, Any] | None = None) -> list[Obj]:
    """Every object an install renders (hooks included), as ``helm template`` would."""
    with helm.Chart.load(CHART_DIR) as chart:
        vals = values if values is not None else SANDBOX_VALUES
        chart.validate_schema(vals)
        manifests = chart.render(vals, name=RELEASE, namespace=namespace, is_install=True)
    docs: list[Obj] = []
    for path, text in sorted(manifests.items()):
        if path.endswith((".yaml", ".yml")):
            docs.extend(d for d in yaml.safe_load_all(text) if isinstance(d, dict))
    return docs


def crds() -> list[Obj]:
    """The CRDs of ``crds/`` as Helm installs them (not templated)."""
    with helm.Chart.load(CHART_DIR) as chart:
        return [yaml.safe_load(item["data"]) for item in chart.crds]


def _component(obj: Obj) -> str:
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(COMPONENT_LABEL, ""))


def _one(docs: list[Obj], kind: str, component: str) -> Obj:
    found = [d for d in docs if d.get("kind") == kind and _component(d) == component]
    if len(found) != 1:
        raise LookupError(f"the chart rendered {len(found)} {kind} for {component}")
    return found[0]


def objects(namespace: str, values: dict[str, Any] | None = None) -> ChartObjects:
    """The objects the sandbox installs for a release in ``namespace``."""
    docs = render(namespace, values)
    rbac: dict[str, list[Obj]] = {}
    accounts: dict[str, str] = {}
    for component in (*COMPONENTS, USER_ACCESS):
        mine = [d for d in docs if d.get("kind") in RBAC_KINDS and _component(d) == component]
        if mine:
            rbac[component] = sorted(mine, key=lambda d: RBAC_KINDS.index(d["kind"]))
        account = next((d for d in mine if d["kind"] == "ServiceAccount"), None)
        if account is not None:
            accounts[component] = str(account["metadata"]["name"])
    configuration = next(d for d in docs if d.get("kind") == "MutatingWebhookConfiguration")
    return ChartObjects(
        crds=crds(),
        rbac=rbac,
        service_accounts=accounts,
        webhook_service=_one(docs, "Service", "webhook"),
        webhook_configuration=configuration,
        namespace=namespace,
        webhook_secret=_mounted_secret(_one(docs, "Deployment", "webhook")),
        certs_environment=_job_environment(docs),
    )


def _pod_spec(workload: Obj) -> Obj:
    spec: Obj = workload["spec"]["template"]["spec"]
    return spec


def _mounted_secret(deployment: Obj) -> str:
    """The Secret behind the webhook's ``tls`` volume."""
    for volume in _pod_spec(deployment).get("volumes") or []:
        if "secret" in volume:
            return str(volume["secret"]["secretName"])
    raise LookupError("the webhook Deployment mounts no Secret")


def _job_environment(docs: list[Obj]) -> dict[str, str]:
    """The literal ``env`` of the certs hook Job (``valueFrom`` entries are skipped)."""
    jobs = [d for d in docs if d.get("kind") == "Job" and _component(d) == "certs"]
    if not jobs:
        return {}
    container = _pod_spec(jobs[0])["containers"][0]
    return {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e}


def with_ca_bundle(configuration: Obj, ca_pem: bytes) -> Obj:
    """A copy of the configuration whose every webhook trusts ``ca_pem``."""
    out = copy.deepcopy(configuration)
    bundle = base64.b64encode(ca_pem).decode("ascii")
    for hook in out.get("webhooks") or []:
        hook.setdefault("clientConfig", {})["caBundle"] = bundle
    return out


def without_ca_bundle(configuration: Obj) -> Obj:
    """A copy with every ``caBundle`` removed (what the chart renders)."""
    out = copy.deepcopy(configuration)
    for hook in out.get("webhooks") or []:
        (hook.get("clientConfig") or {}).pop("caBundle", None)
    return out
