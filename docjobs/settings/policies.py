"""The policy file: named policies (document classes), and a job's ad-hoc overrides of one."""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.models import JobOverrides
from docjobs.domain.policy import (
    BUILTIN_PATTERN_NAMES,
    Policy,
    RedactPolicy,
    RedactRegion,
    SanitizeMode,
    WatermarkPolicy,
)
from docjobs.settings.config import ConfigError

T = TypeVar("T")
TRUSTED_ONLY = "trusted_only"  # a policy file's flag: no tenant gets the policy unless its list names it


def parse_region(spec: str) -> RedactRegion:
    """`PAGE:X0,Y0,X1,Y1` (page from 1, PDF points in the page's default user space) as a region."""
    page, _, box = spec.partition(":")
    corners = box.split(",")
    try:
        if len(corners) != 4:
            raise ValueError
        x0, y0, x1, y1 = (float(value) for value in corners)
        return RedactRegion(page=int(page), x0=min(x0, x1), y0=min(y0, y1), x1=max(x0, x1), y1=max(y0, y1))
    except ValueError:
        raise ConfigError(
            f"a redaction region is PAGE:X0,Y0,X1,Y1 with a page >= 1 and an area, not {spec!r}"
        ) from None


def _unknown_keys(model: type[BaseModel], body: dict[str, Any], prefix: str = "") -> list[str]:
    """Keys of a policy file that no field of `model` (or its nested models) takes: typos must not pass."""
    unknown = []
    for key, value in body.items():
        field = model.model_fields.get(key)
        if field is None:
            unknown.append(prefix + key)
        elif isinstance(value, dict) and isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            unknown += _unknown_keys(field.annotation, value, f"{prefix}{key}.")
    return unknown


def job_overrides(
    *,
    watermark: str | None = None,
    mode: str | None = None,
    dpi: int | None = None,
    ocr: str | None = None,
    sign: bool | None = None,
    redact: Sequence[str] = (),
    redact_regions: Sequence[str] = (),
) -> JobOverrides:
    """The overrides as the command line's flags and the API's policy part spell them: `redact` built-in pattern
    names or regexes, `redact_regions` `PAGE:X0,Y0,X1,Y1` (ConfigError when malformed).
    Raises pydantic's ValidationError for an invalid value."""
    overrides = JobOverrides.model_validate(
        {
            "watermark_text": watermark,
            "watermark_mode": mode,
            "watermark_dpi": dpi,
            "ocr_mode": ocr,
            "sign": sign,
            "redact_patterns": tuple(redact),
            "redact_regions": tuple(map(parse_region, redact_regions)),
        }
    )
    return check_overrides(overrides)


def check_overrides(overrides: JobOverrides) -> JobOverrides:
    """The overrides, if the job's `resolve` step can apply them as far as they alone tell: the watermark text
    prints in the stamp's font, and every pattern that is no built-in name compiles on the linear-time engine
    (else pydantic's ValidationError, as resolving raises). Clients check this before they store anything;
    only `resolve` applies overrides to a policy."""
    if overrides.watermark_text is not None:
        WatermarkPolicy(text=overrides.watermark_text)
    RedactPolicy(
        regexes=tuple(pattern for pattern in overrides.redact_patterns if pattern not in BUILTIN_PATTERN_NAMES)
    )
    return overrides


def _added(named: tuple[T, ...], resolved: tuple[T, ...]) -> tuple[T, ...]:
    """What `resolved` appends to `named` (all of it, when it does not start with `named`)."""
    return resolved[len(named) :] if resolved[: len(named)] == named else resolved


def overrides_between(named: Policy, resolved: Policy) -> JobOverrides:
    """The overrides that make `resolved` of `named` as `PolicyBook.resolve` applies them: what a batch whose client
    resolved its policy (an old history) asks its documents for. What overrides cannot say stays unsaid, and the
    document's `resolve`, held to `resolved`'s fingerprint, then fails it `policy.changed`, as for a changed file."""

    def changed(before: T, after: T) -> T | None:
        return after if after != before else None

    watermark, redact = resolved.watermark, resolved.redact
    return JobOverrides(
        watermark_text=changed(named.watermark.text, watermark.text),
        watermark_mode=changed(named.watermark.mode, watermark.mode),
        watermark_dpi=changed(named.watermark.dpi, watermark.dpi),
        ocr_mode=changed(named.ocr.mode, resolved.ocr.mode),
        sign=changed(named.sign.enabled, resolved.sign.enabled),
        redact_patterns=(
            *_added(named.redact.patterns, redact.patterns),
            *_added(named.redact.regexes, redact.regexes),
        ),
        redact_regions=_added(named.redact.regions, redact.regions),
    )


class PolicyBook:
    """The named policies of a policy file.

    A policy is **trusted-only** when the file marks it `trusted_only = true`, or when it keeps active content
    (`sanitize.mode = "keep"`: meant for trusted inputs only). The flag is not part of the policy itself (nor
    of its version): it says who may name it, not what it does."""

    def __init__(self, policies: dict[str, Policy], default: str, trusted_only: frozenset[str] = frozenset()) -> None:
        if default not in policies:
            raise ConfigError(f"default policy {default!r} is not defined")
        self.policies = policies
        self.default = default
        self.trusted_only = frozenset(
            name
            for name, policy in policies.items()
            if name in trusted_only or policy.sanitize.mode is SanitizeMode.KEEP
        )

    def for_tenant(self, listed: Sequence[str] | None) -> frozenset[str]:
        """The policies a tenant may name: its own list (`tenant add --policies`), or without one every
        policy that is not trusted-only."""
        if listed is not None:
            return frozenset(listed) & frozenset(self.policies)
        return frozenset(self.policies) - self.trusted_only

    def check_allowed(self, name: str, listed: Sequence[str] | None) -> None:
        """`policy.forbidden` unless the tenant whose list is `listed` may name the policy `name`."""
        if name not in self.for_tenant(listed):
            raise DocJobError(FailureCode.POLICY_FORBIDDEN)

    @classmethod
    def load(cls, path: Path) -> PolicyBook:
        try:
            raw = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read policy file {path}: {exc}") from None
        try:
            policies, trusted_only = {}, set()
            for name, body in raw.get("policies", {}).items():
                flag = body.pop(TRUSTED_ONLY, False)
                if not isinstance(flag, bool):
                    raise ValueError(f"policy {name!r}: {TRUSTED_ONLY} is true or false")
                if flag:
                    trusted_only.add(name)
                unknown = _unknown_keys(Policy, body)
                if unknown:
                    raise ValueError(f"policy {name!r} has unknown setting(s): {', '.join(unknown)}")
                policies[name] = Policy(name=name, **body)
        except ValueError as exc:
            raise ConfigError(f"invalid policy in {path}: {exc}") from None
        return cls(policies, raw.get("default", "standard"), frozenset(trusted_only))

    def resolve(self, name: str | None, overrides: JobOverrides | None = None) -> Policy:
        """A named policy with ad-hoc overrides (an override makes a new policy version, hence a new job).

        Raises ConfigError for an unknown name, pydantic's ValidationError for an invalid override."""
        policy = self.get(name)
        if overrides is None or overrides == JobOverrides():
            return policy
        body = policy.model_dump()
        watermark = {"text": overrides.watermark_text, "mode": overrides.watermark_mode, "dpi": overrides.watermark_dpi}
        body["watermark"].update({key: value for key, value in watermark.items() if value is not None})
        if overrides.ocr_mode is not None:
            body["ocr"]["mode"] = overrides.ocr_mode
        if overrides.sign is not None:
            body["sign"]["enabled"] = overrides.sign
        for pattern in overrides.redact_patterns:
            kind = "patterns" if pattern in BUILTIN_PATTERN_NAMES else "regexes"
            body["redact"][kind] = (*body["redact"][kind], pattern)
        body["redact"]["regions"] = (*body["redact"]["regions"], *overrides.redact_regions)
        return Policy.model_validate(body)

    def get(self, name: str | None) -> Policy:
        chosen = name or self.default
        try:
            return self.policies[chosen]
        except KeyError:
            known = ", ".join(sorted(self.policies))
            raise ConfigError(f"unknown policy {chosen!r} (known: {known})") from None
