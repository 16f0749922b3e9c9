"""The policy file: named policies (document classes), and a job's ad-hoc overrides of one."""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from docjobs.config import ConfigError
from docjobs.models import BUILTIN_PATTERN_NAMES, Policy, RedactRegion


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


class PolicyBook:
    """The named policies of a policy file."""

    def __init__(self, policies: dict[str, Policy], default: str) -> None:
        if default not in policies:
            raise ConfigError(f"default policy {default!r} is not defined")
        self.policies = policies
        self.default = default

    @classmethod
    def load(cls, path: Path) -> PolicyBook:
        try:
            raw = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read policy file {path}: {exc}") from None
        try:
            policies = {}
            for name, body in raw.get("policies", {}).items():
                unknown = _unknown_keys(Policy, body)
                if unknown:
                    raise ValueError(f"policy {name!r} has unknown setting(s): {', '.join(unknown)}")
                policies[name] = Policy(name=name, **body)
        except ValueError as exc:
            raise ConfigError(f"invalid policy in {path}: {exc}") from None
        return cls(policies, raw.get("default", "standard"))

    def resolve(
        self,
        name: str | None,
        *,
        watermark: str | None = None,
        mode: str | None = None,
        dpi: int | None = None,
        ocr: str | None = None,
        sign: bool | None = None,
        redact: Sequence[str] = (),
        redact_regions: Sequence[str] = (),
    ) -> Policy:
        """A named policy with ad-hoc overrides (an override makes a new policy version, hence a new job).

        `redact` adds built-in pattern names or regexes, `redact_regions` adds `PAGE:X0,Y0,X1,Y1` regions.
        Raises ConfigError for an unknown name, pydantic's ValidationError for an invalid override."""
        policy = self.get(name)
        watermark_changes = {
            key: value for key, value in (("text", watermark), ("mode", mode), ("dpi", dpi)) if value is not None
        }
        if not watermark_changes and ocr is None and sign is None and not redact and not redact_regions:
            return policy
        body = policy.model_dump()
        body["watermark"].update(watermark_changes)
        if ocr is not None:
            body["ocr"]["mode"] = ocr
        if sign is not None:
            body["sign"]["enabled"] = sign
        for pattern in redact:
            kind = "patterns" if pattern in BUILTIN_PATTERN_NAMES else "regexes"
            body["redact"][kind] = (*body["redact"][kind], pattern)
        body["redact"]["regions"] = (*body["redact"]["regions"], *map(parse_region, redact_regions))
        return Policy.model_validate(body)

    def get(self, name: str | None) -> Policy:
        chosen = name or self.default
        try:
            return self.policies[chosen]
        except KeyError:
            known = ", ".join(sorted(self.policies))
            raise ConfigError(f"unknown policy {chosen!r} (known: {known})") from None
