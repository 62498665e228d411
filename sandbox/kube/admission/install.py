"""Plugging admission into the API emulator.

``install(server)`` appends the ``WebhookDispatcher`` to the server's mutating
admission chain (reading the server's own store) and serves MutatingWebhookConfiguration
objects with ``WebhookConfigurationStrategy``: v1 defaults on every write, validation
(422) on create and update — the server never sends the admissionregistration group
through admission, so validation lives in the storage strategy, as in the apiserver.
"""

from __future__ import annotations

from typing import Any

from sandbox.kube import cluster
from sandbox.kube.admission.dispatcher import CONFIGURATIONS, WebhookDispatcher
from sandbox.kube.admission.matching import ADMISSION_GROUP
from sandbox.kube.admission.source import StoreSource
from sandbox.kube.admission.validation import default_configuration, validate_configuration
from sandbox.kube.errors import FieldError
from sandbox.kube.server import KubeServer
from sandbox.kube.strategy import ConditionalStrategy


class WebhookConfigurationStrategy(ConditionalStrategy):
    """MutatingWebhookConfiguration: PUT needs a resourceVersion; defaulted; validated."""

    def default(self, obj: dict[str, Any]) -> None:
        defaulted = default_configuration(obj)
        obj.clear()
        obj.update(defaulted)

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        return validate_configuration(obj)


def install(server: KubeServer) -> WebhookDispatcher:
    """Add webhook dispatch and configuration validation to ``server`` (idempotent)."""
    cluster.STRATEGIES[(ADMISSION_GROUP, CONFIGURATIONS)] = WebhookConfigurationStrategy()
    for plugin in server.mutating_admission:
        if isinstance(plugin, WebhookDispatcher):
            return plugin
    dispatcher = WebhookDispatcher(StoreSource(server.store))
    server.mutating_admission.append(dispatcher)
    return dispatcher
