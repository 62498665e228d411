"""The webhook's settings added against the bypasses: the GPU resources and the review
size limit — defaults, and malformed values refused by name, all at once."""

from __future__ import annotations

import pytest

from shared import vocab
from shared.policy.gpus import DEFAULT_GPU_PREFIXES, GpuResources
from shared.settings import SettingsError
from webhook import settings

#: What every webhook needs set.
BASE = {"TLS_CERT_FILE": "/tls/tls.crt", "TLS_KEY_FILE": "/tls/tls.key"}


def named(problems: list[str]) -> set[str]:
    """The variables a list of problems names (``NAME='value' …``)."""
    return {p.split("=", 1)[0].split(" ", 1)[0] for p in problems}


def test_defaults_count_whole_nvidia_gpus_and_refuse_other_vendor_resources() -> None:
    loaded, _ = settings.load(BASE)
    resources = loaded.policy.rules.gpu_resources
    assert resources == GpuResources(((vocab.GPU_RESOURCE, 1),), DEFAULT_GPU_PREFIXES)
    assert resources.is_unlisted("nvidia.com/mig-1g.10gb")
    assert not resources.is_unlisted(vocab.GPU_RESOURCE)


def test_listed_weights_and_an_empty_prefix_list_are_read() -> None:
    env = {
        **BASE,
        "GPU_RESOURCE_WEIGHTS": " nvidia.com/gpu=1 , nvidia.com/mig-3g.40gb=4 ",
        "GPU_RESOURCE_PREFIXES": "",
    }
    loaded, _ = settings.load(env)
    weights = ((vocab.GPU_RESOURCE, 1), ("nvidia.com/mig-3g.40gb", 4))
    assert loaded.policy.rules.gpu_resources == GpuResources(weights, ())


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        pytest.param("GPU_RESOURCE_WEIGHTS", vocab.GPU_RESOURCE, id="no-weight"),
        pytest.param("GPU_RESOURCE_WEIGHTS", "nvidia.com/gpu=0", id="zero-weight"),
        pytest.param("GPU_RESOURCE_WEIGHTS", "nvidia.com/gpu=1.5", id="fraction"),
        pytest.param("GPU_RESOURCE_WEIGHTS", "nvidia.com/gpu=-1", id="negative"),
        pytest.param("GPU_RESOURCE_WEIGHTS", "nvidia.com/gpu=99999", id="huge"),
        pytest.param("GPU_RESOURCE_WEIGHTS", "gpu=1", id="no-domain"),
        pytest.param("GPU_RESOURCE_WEIGHTS", "nvidia.com/gpu=1,nvidia.com/gpu=2", id="twice"),
        pytest.param("GPU_RESOURCE_WEIGHTS", "nvidia.com/gpu=1,,", id="empty-item"),
        pytest.param("GPU_RESOURCE_WEIGHTS", "nvidia.com/gpu=١", id="non-ascii-digit"),
        pytest.param("GPU_RESOURCE_PREFIXES", "nvidia.com", id="prefix-without-slash"),
        pytest.param("GPU_RESOURCE_PREFIXES", "NVIDIA.com/", id="prefix-upper-case"),
        pytest.param("WEBHOOK_MAX_BODY_BYTES", "3.1e6", id="body-not-integer"),
        pytest.param("WEBHOOK_MAX_BODY_BYTES", "1000", id="body-too-small"),
    ],
)
def test_a_malformed_value_is_refused_by_name(variable: str, value: str) -> None:
    with pytest.raises(SettingsError) as info:
        settings.load({**BASE, variable: value})
    assert named(info.value.problems) == {variable}


def test_every_malformed_value_is_named_at_once() -> None:
    env = {**BASE, "GPU_RESOURCE_WEIGHTS": "x", "GPU_RESOURCE_PREFIXES": "y"}
    with pytest.raises(SettingsError) as info:
        settings.load(env)
    assert named(info.value.problems) == {"GPU_RESOURCE_WEIGHTS", "GPU_RESOURCE_PREFIXES"}
