"""Typed, frozen settings built once from the environment (DESIGN §7).

Each process builds its settings at start with ``EnvReader``, which collects every
problem before failing: a process with three bad variables says so in one message and
exits non-zero. Two kinds of field:

- *strict* fields (our new variables, and the two required ones) turn a bad value
  into an error;
- *seed* fields keep the replaced controller's behaviour: an invalid integer or zone
  falls back to its default with a ``config.invalid`` notice, and an unrecognised
  boolean word quietly means the default (``original-behaviour.md`` §3).

Nothing reads ``os.environ`` after startup; secrets live in ``SecretStr`` whose repr
is masked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from shared.clock import Clock, ScaledClock, SystemClock, parse_utc
from shared.policy.gpus import (
    DEFAULT_GPU_PREFIXES,
    DEFAULT_GPU_WEIGHTS,
    GpuResources,
    parse_prefixes,
    parse_weights,
)
from shared.policy.matching import MatchRules

T = TypeVar("T")

_TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
_FALSE_WORDS = frozenset({"0", "false", "no", "off"})
_LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")


class SettingsError(Exception):
    """One or more environment variables are invalid; the message lists every one."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in problems))
        self.problems = problems


@dataclass(frozen=True)
class SecretStr:
    """A secret value whose repr and str never show it."""

    value: str = field(repr=False)

    def __repr__(self) -> str:
        return "SecretStr('****')"

    def __str__(self) -> str:
        return "****"


@dataclass(frozen=True)
class Notice:
    """A seed-style fallback: the variable was invalid and its default is used."""

    variable: str
    reason: str
    value: str


class EnvReader:
    """Reads typed values from an environment mapping, collecting every problem."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env
        self.problems: list[str] = []
        self.notices: list[Notice] = []

    def raw(self, name: str) -> str | None:
        """The trimmed value, ``None`` when unset or empty."""
        value = self._env.get(name)
        if value is None or not value.strip():
            return None
        return value.strip()

    def text(self, name: str) -> str | None:
        """The trimmed value, ``None`` only when unset (empty stays empty)."""
        value = self._env.get(name)
        return None if value is None else value.strip()

    def check(self) -> None:
        """Raise ``SettingsError`` if any strict field was invalid."""
        if self.problems:
            raise SettingsError(self.problems)

    # --- strict readers -------------------------------------------------------------

    def required(self, name: str) -> str:
        """A variable that must be set."""
        value = self.raw(name)
        if value is None:
            self.problems.append(f"{name} is required but not set")
            return ""
        return value

    def string(self, name: str, default: str | None = None) -> str | None:
        """An optional string (empty means unset)."""
        value = self.raw(name)
        return default if value is None else value

    def secret(self, name: str, required: bool = False) -> SecretStr | None:
        """An optional (or required) secret."""
        value = self.required(name) if required else self.raw(name)
        return SecretStr(value) if value else None

    def integer(
        self,
        name: str,
        default: int,
        minimum: int | None = None,
        maximum: int | None = None,
        strict: bool = True,
    ) -> int:
        """An integer in ``[minimum, maximum]``; ``strict=False`` is the seed's fallback."""
        return self._parsed(name, default, _int_parser(minimum, maximum), strict)

    def number(
        self, name: str, default: float, minimum: float | None = None, strict: bool = True
    ) -> float:
        """A float ``>= minimum``."""
        return self._parsed(name, default, _float_parser(minimum), strict)

    def boolean(self, name: str, default: bool, strict: bool = True) -> bool:
        """1/true/yes/on or 0/false/no/off (any case); seed fields ignore other words."""
        value = self.raw(name)
        if value is None:
            return default
        word = value.lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
        if strict:
            self.problems.append(
                f"{name}={value!r} is not a boolean (use one of true/false, yes/no, on/off, 1/0)"
            )
        return default

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        """One of ``choices`` (case-insensitive)."""
        value = self.raw(name)
        if value is None:
            return default
        if value.lower() not in choices:
            self.problems.append(f"{name}={value!r} must be one of {', '.join(choices)}")
            return default
        return value.lower()

    # --- seed-compatible readers ------------------------------------------------------

    def timezone(self, name: str, fallback: str | None) -> ZoneInfo | None:
        """An IANA zone; unknown → notice and ``fallback`` (the process zone).

        A name the database does not hold can also come back as an ``OSError`` (a
        folder such as ``America`` is read as a directory), which is unknown too.
        """
        value = self.raw(name) or fallback
        if value is None:
            return None
        try:
            return ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            self.notices.append(Notice(name, "unknown_timezone", value))
            if fallback and fallback != value:
                return self.timezone("TZ", None)
            return None

    def log_level(self, name: str, default: str) -> int:
        """A logging level name; unknown → notice and ``default``."""
        value = self.raw(name)
        if value is None:
            return logging.getLevelName(default)  # type: ignore[no-any-return]
        if value.upper() not in _LOG_LEVELS:
            self.notices.append(Notice(name, "unknown_log_level", value))
            return logging.getLevelName(default)  # type: ignore[no-any-return]
        return logging.getLevelName(value.upper())  # type: ignore[no-any-return]

    # --- plumbing ---------------------------------------------------------------------

    def _parsed(self, name: str, default: T, parse: Callable[[str], T], strict: bool) -> T:
        value = self.raw(name)
        if value is None:
            return default
        try:
            return parse(value)
        except _OutOfRange as exc:
            self._bad(name, value, "out_of_range", str(exc), strict)
        except ValueError:
            self._bad(name, value, "not_a_number", "is not a number", strict)
        return default

    def _bad(self, name: str, value: str, reason: str, why: str, strict: bool) -> None:
        if strict:
            self.problems.append(f"{name}={value!r} {why}")
        else:
            seed_reason = "not_an_integer" if reason == "not_a_number" else reason
            self.notices.append(Notice(name, seed_reason, value))


class _OutOfRange(ValueError):
    pass


def _int_parser(minimum: int | None, maximum: int | None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        _check_range(value, minimum, maximum)
        return value

    return parse


def _float_parser(minimum: float | None) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text)
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(text)
        _check_range(value, minimum, None)
        return value

    return parse


def _check_range(value: float, minimum: float | None, maximum: float | None) -> None:
    if minimum is not None and value < minimum:
        raise _OutOfRange(f"is below the minimum {minimum}")
    if maximum is not None and value > maximum:
        raise _OutOfRange(f"is above the maximum {maximum}")


@dataclass(frozen=True)
class CommonSettings:
    """Settings every process reads."""

    #: Level of our own loggers.
    log_level: int
    #: Level of httpx/httpcore/urllib3/kubernetes loggers (the stricter of the two wins).
    library_log_level: int
    #: Zone human-facing prose renders in (EVENT_DISPLAY_TIMEZONE, else TZ, else UTC).
    display_timezone: ZoneInfo | None
    #: Path to a kubeconfig; ``None`` means in-cluster credentials.
    kubeconfig: str | None
    #: Namespace of the controller's own objects (GPUReservations, Lease).
    namespace: str
    #: K8S_TLS_STRICT_VERIFY: OpenSSL's strict X.509 checks on the connection to the API
    #: server (``shared.gateway.strict_verification``). Seed boolean: a word that is not
    #: one keeps the default, quietly.
    tls_strict_verify: bool = True


def read_common(reader: EnvReader) -> CommonSettings:
    """The common settings (seed variable names)."""
    return CommonSettings(
        log_level=reader.log_level("LOG_LEVEL", "INFO"),
        library_log_level=reader.log_level("LIBRARY_LOG_LEVEL", "WARNING"),
        display_timezone=reader.timezone("EVENT_DISPLAY_TIMEZONE", reader.raw("TZ")),
        kubeconfig=reader.string("KUBECONFIG"),
        namespace=reader.string("POD_NAMESPACE") or _service_account_namespace() or "default",
        tls_strict_verify=reader.boolean("K8S_TLS_STRICT_VERIFY", True, strict=False),
    )


def read_gpu_resources(reader: EnvReader) -> GpuResources:
    """GPU_RESOURCE_WEIGHTS and GPU_RESOURCE_PREFIXES (both processes; strict)."""
    weights, prefixes = DEFAULT_GPU_WEIGHTS, DEFAULT_GPU_PREFIXES
    text = reader.raw("GPU_RESOURCE_WEIGHTS")
    if text is not None:
        try:
            weights = parse_weights(text)
        except ValueError as exc:
            reader.problems.append(f"GPU_RESOURCE_WEIGHTS={text!r}: {exc}")
    text = reader.text("GPU_RESOURCE_PREFIXES")  # set but empty: no prefix
    if text is not None:
        try:
            prefixes = parse_prefixes(text)
        except ValueError as exc:
            reader.problems.append(f"GPU_RESOURCE_PREFIXES={text!r}: {exc}")
    return GpuResources(weights, prefixes)


def read_rules(reader: EnvReader) -> MatchRules:
    """The seed's matching variables, with the seed's lenient parsing (both processes),
    and the GPU resources (strict)."""
    return MatchRules(
        gpu_resources=read_gpu_resources(reader),
        required_group_label=reader.string("REQUIRED_GROUP_LABEL"),
        default_usage_group=reader.string("DEFAULT_USAGE_GROUP"),
        horizon=timedelta(minutes=reader.integer("ONDEMAND_HORIZON_MINUTES", 30, 0, strict=False)),
        leases_enabled=reader.boolean("ONDEMAND_LEASE_ENABLED", True, strict=False),
        best_effort_enabled=reader.boolean("BEST_EFFORT_ENABLED", False, strict=False),
        default_minimum_runtime_s=reader.integer(
            "DEFAULT_MINIMUM_RUNTIME_SECONDS", 0, 0, strict=False
        ),
    )


@dataclass(frozen=True)
class ClockSettings:
    """The process clock; only the sandbox sets these (scaled time for scenarios)."""

    #: CLOCK_FACTOR: how many seconds of process time pass per wall second.
    factor: float
    #: CLOCK_EPOCH: the instant the scaled clock starts at (UTC).
    epoch: datetime | None
    #: CLOCK_STARTED_AT: the wall time (Unix seconds) at which ``epoch`` was now.
    started_at: float | None

    def build(self) -> Clock:
        """A ``SystemClock`` unless scaling or an epoch is configured."""
        if self.factor == 1.0 and self.epoch is None:
            return SystemClock()
        return ScaledClock(self.factor, self.epoch, self.started_at)


def read_clock(reader: EnvReader) -> ClockSettings:
    """CLOCK_FACTOR / CLOCK_EPOCH / CLOCK_STARTED_AT (both processes)."""
    factor = reader.number("CLOCK_FACTOR", 1.0, minimum=0.001)
    epoch_text = reader.string("CLOCK_EPOCH")
    epoch = None
    if epoch_text is not None:
        try:
            epoch = parse_utc(epoch_text)
        except ValueError:
            reader.problems.append(f"CLOCK_EPOCH={epoch_text!r} is not a UTC instant")
    started = reader.number("CLOCK_STARTED_AT", -1.0)
    return ClockSettings(factor, epoch, started if started >= 0 else None)


_SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def _service_account_namespace() -> str | None:
    try:
        with open(_SA_NAMESPACE_FILE, encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError:
        return None
