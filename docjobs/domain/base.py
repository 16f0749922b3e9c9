"""The boundaries' common ground: the two kinds of model (`Frozen`, read leniently from histories; `Strict`, a
public contract) and the patterns of the identifiers they carry (docjobs/domain/models.py, policy.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

SHA256_PATTERN = r"^[0-9a-f]{64}$"
TENANT_PATTERN = r"^[A-Za-z0-9_.@-]{1,64}$"  # the first segment of a job ID: no '/', safe in a visibility query
POLICY_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
POLICY_VERSION_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}@[0-9a-f]{12}$"  # Policy.version
# The largest integer canonical JSON (RFC 8785: numbers as IEEE doubles) writes exactly. A job's ask, its policy and
# its version are canonical JSON: an integer beyond it there is refused as invalid, never a crash when hashed.
JSON_SAFE_INTEGER = 2**53 - 1


class Frozen(BaseModel):
    # Unknown fields are ignored so that histories recorded by older code still replay (a removed field
    # must not break jobs in flight); policy files are checked for unknown keys separately.
    model_config = ConfigDict(frozen=True, extra="ignore")


class Strict(BaseModel):
    """A public contract: an unknown (e.g. misspelt) field is refused, not ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid")
