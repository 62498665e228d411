"""The admission hook shape the API server calls (``sandbox.kube.admission_api``)."""

from __future__ import annotations

from sandbox.kube.admission_api import (
    AdmissionAttributes,
    AdmissionError,
    AdmissionResult,
    MutatingAdmission,
    UserInfo,
)

__all__ = [
    "AdmissionAttributes",
    "AdmissionError",
    "AdmissionResult",
    "MutatingAdmission",
    "UserInfo",
]
