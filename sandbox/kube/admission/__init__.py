"""Mutating admission of the Kubernetes API emulator: webhook dispatch and its configs.

``WebhookDispatcher`` is the MutatingAdmissionWebhook plugin; ``ConfigurationValidator``
defaults and validates MutatingWebhookConfiguration writes; ``StoreSource`` gives both
read access to the server's in-process store.
"""

from __future__ import annotations

from sandbox.kube.admission.dispatcher import WebhookDispatcher
from sandbox.kube.admission.source import MemorySource, ObjectSource, StoreSource
from sandbox.kube.admission.validation import ConfigurationValidator

__all__ = [
    "ConfigurationValidator",
    "MemorySource",
    "ObjectSource",
    "StoreSource",
    "WebhookDispatcher",
]
