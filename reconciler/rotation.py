"""The leader's periodic certificate check in self-signed mode.

The chart's hook Job runs ``python -m certs ensure`` at install and upgrade; between
upgrades nothing would renew the webhook's serving certificate before it expires. So
in self-signed mode the leader runs the same ``certs.apply.ensure`` every
``CERT_CHECK_INTERVAL`` seconds, with the same target names and lifetimes as the Job
(``CERTS_SERVICE_NAME``, ``CERTS_SECRET_NAME``, ``CERTS_CA_SECRET_NAME``,
``CERTS_WEBHOOK_CONFIGURATION``, ``CERTS_RENEW_BEFORE_DAYS``, ``CERTS_VALIDITY_DAYS``,
``CERTS_CA_VALIDITY_DAYS``; read by ``certs.settings``). With good certificates in
place a check only reads. Off unless ``CERT_CHECK_INTERVAL`` is set above 0 (the chart
sets it in self-signed mode only; with cert-manager, cert-manager renews).

A check that fails (the API refused, a Secret of the wrong type) is logged and retried
at the next interval; the loop itself never ends, so the task guard stays quiet.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from certs.apply import CertsError, KubeAccess, Outcome, ensure
from reconciler.base.settings import RotationSettings
from shared.clock import Clock
from shared.errors import KubeError
from shared.logs import log

_log = logging.getLogger(__name__)

ROTATION_TASK = "cert-rotation"


class Rotator:
    """Runs ``certs.apply.ensure`` on the leader every interval."""

    def __init__(self, kube: KubeAccess, settings: RotationSettings | None, clock: Clock) -> None:
        self.kube, self.settings, self.clock = kube, settings, clock

    def loops(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        """The rotation loop, or none when the check is off."""
        return [] if self.settings is None else [(ROTATION_TASK, self.run)]

    async def run(self) -> None:
        """Check now, then every interval."""
        assert self.settings is not None
        while True:
            await self.check_once()
            await self.clock.sleep(self.settings.interval_s)

    async def check_once(self) -> Outcome | None:
        """One ``ensure``; ``None`` (logged) when it failed."""
        assert self.settings is not None
        target = self.settings.target
        try:
            outcome = await ensure(self.kube, target, self.settings.policy, self.clock)
        except (CertsError, KubeError) as exc:
            log(_log, logging.WARNING, "certs.check_failed", secret=target.secret, detail=str(exc))
            return None
        level = logging.INFO if outcome.changed else logging.DEBUG
        log(
            _log,
            level,
            "certs.checked",
            action=str(outcome.action),
            changed=outcome.changed,
            not_after=outcome.not_after.isoformat(),
        )
        return outcome
