"""Configuration writes are defaulted and validated (422 with field causes)."""

from __future__ import annotations

import dataclasses

import pytest

from sandbox.kube.admission import ConfigurationValidator
from sandbox.kube.admission.hook import AdmissionError
from tests.admission.builders import attrs, configuration, webhook

pytestmark = pytest.mark.anyio


def write(config: dict[str, object]):
    base = attrs()
    return dataclasses.replace(
        base,
        group="admissionregistration.k8s.io",
        kind="MutatingWebhookConfiguration",
        resource="mutatingwebhookconfigurations",
        namespace=None,
        name="cfg",
        object=config,
    )


async def test_defaults_are_filled_in() -> None:
    raw = webhook("a.example.com", clientConfig={"service": {"namespace": "n", "name": "s"}})
    result = await ConfigurationValidator().admit(write(configuration("cfg", raw)))
    assert result.object is not None
    hook = result.object["webhooks"][0]
    assert hook["failurePolicy"] == "Fail"
    assert hook["timeoutSeconds"] == 10
    assert hook["reinvocationPolicy"] == "Never"
    assert hook["matchPolicy"] == "Equivalent"
    assert hook["clientConfig"]["service"]["port"] == 443
    assert hook["rules"][0]["scope"] == "*"


@pytest.mark.parametrize(
    ("fields", "field", "text"),
    [
        pytest.param(
            {"matchConditions": [{"name": "x", "expression": "params.a"}]},
            "webhooks[0].matchConditions[0].expression",
            "undeclared reference to 'params'",
            id="unbound-cel-variable",
        ),
        pytest.param(
            {"matchConditions": [{"name": "x", "expression": "object.("}]},
            "webhooks[0].matchConditions[0].expression",
            "compilation failed",
            id="cel-syntax",
        ),
        pytest.param(
            {"timeoutSeconds": 31}, "webhooks[0].timeoutSeconds", "between 1 and 30", id="timeout"
        ),
        pytest.param(
            {"sideEffects": "Some"}, "webhooks[0].sideEffects", "Unsupported", id="side-effects"
        ),
        pytest.param({"name": "short.name"}, "webhooks[0].name", "three segments", id="name"),
        pytest.param(
            {"clientConfig": {"url": "http://x.example.com/"}},
            "webhooks[0].clientConfig.url",
            "'https'",
            id="http-url",
        ),
        pytest.param(
            {"admissionReviewVersions": ["v1beta1"]},
            "webhooks[0].admissionReviewVersions",
            "v1",
            id="review-version",
        ),
    ],
)
async def test_invalid_configurations_are_422(
    fields: dict[str, object], field: str, text: str
) -> None:
    raw = {**webhook("a.example.com"), **fields}
    with pytest.raises(AdmissionError) as info:
        await ConfigurationValidator().admit(write(configuration("cfg", raw)))
    assert info.value.code == 422
    status = info.value.status
    assert status["reason"] == "Invalid"
    assert status["message"].startswith(
        'MutatingWebhookConfiguration.admissionregistration.k8s.io "cfg" is invalid: '
    )
    causes = status["details"]["causes"]
    assert [c["field"] for c in causes] == [field]
    assert text in causes[0]["message"]


async def test_other_objects_pass_untouched() -> None:
    request = attrs()
    assert (await ConfigurationValidator().admit(request)).object is request.object
