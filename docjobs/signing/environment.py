"""The signer a deployment configured (DOCJOBS_SIGNING_* / DOCJOBS_TRUST_ROOTS / DOCJOBS_TSA_URL /
DOCJOBS_REVOCATION_URLS), else the development signer; and whether the policies' signature levels can be made.

Apart from `config` (what a signer is) and `dev_ca` (which makes one): the development signer is a `SignerConfig`,
so reading the environment sits above both and the imports point one way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from docjobs.domain.policy import Policy
from docjobs.settings.config import VARIABLES, ConfigError, read_environment
from docjobs.signing.config import SignerConfig
from docjobs.signing.dev_ca import ensure_dev_signer

ENV_NAMES = tuple(
    name
    for name in VARIABLES
    if name.startswith(("DOCJOBS_SIGNING_", "DOCJOBS_TRUST_", "DOCJOBS_TSA_", "DOCJOBS_REVOCATION_"))
)


def signer_from_env(data_dir: Path) -> SignerConfig:
    """From DOCJOBS_SIGNING_* / DOCJOBS_TRUST_ROOTS / DOCJOBS_TSA_URL; without a key, the development signer.

    With the development signer (`ensure_dev_signer(data_dir / "signing")`), DOCJOBS_TRUST_ROOTS adds
    roots to its CA and DOCJOBS_TSA_URL still applies.
    """
    env = read_environment()
    roots = _paths(env.trust_roots)
    tsa_url = env.tsa_url
    if tsa_url is not None and not tsa_url.startswith(("http://", "https://")):
        raise ConfigError("DOCJOBS_TSA_URL must be an http(s) URL")
    revocation_urls = _revocation_urls(env.revocation_urls)
    p12, key, cert = env.signing_p12, env.signing_key, env.signing_cert
    if p12 is None and key is None and cert is None:
        dev = ensure_dev_signer(data_dir / "signing")
        _check_files("DOCJOBS_TRUST_ROOTS", roots)
        return SignerConfig(
            trust_roots=dev.trust_roots + roots,
            key_path=dev.key_path,
            cert_path=dev.cert_path,
            tsa_url=tsa_url,
            revocation_urls=revocation_urls,
        )
    chain = _paths(env.signing_chain)
    for name, value in (("DOCJOBS_SIGNING_P12", p12), ("DOCJOBS_SIGNING_KEY", key), ("DOCJOBS_SIGNING_CERT", cert)):
        _check_files(name, () if value is None else (value,))
    _check_files("DOCJOBS_SIGNING_CHAIN", chain)
    _check_files("DOCJOBS_TRUST_ROOTS", roots)
    return SignerConfig(
        trust_roots=roots,
        p12_path=p12,
        p12_passphrase=env.signing_p12_passphrase,
        key_path=key,
        cert_path=cert,
        chain_paths=chain,
        tsa_url=tsa_url,
        revocation_urls=revocation_urls,
    )


def _revocation_urls(raw: str | None) -> tuple[str, ...]:
    urls = tuple(part.strip() for part in (raw or "").split(",") if part.strip())
    if any(not url.startswith(("http://", "https://")) for url in urls):
        raise ConfigError("DOCJOBS_REVOCATION_URLS must be http(s) URLs, comma-separated")
    return urls


def check_sign_levels(policies: Iterable[Policy]) -> None:
    """Refuse (ConfigError naming the policy) a policy whose `sign.level` this deployment cannot make: B-T and above
    need DOCJOBS_TSA_URL, B-LT and B-LTA also DOCJOBS_REVOCATION_URLS. Checked when the worker starts and when a job's
    policy is resolved, so no job waits on a timestamp authority nobody configured."""
    env = read_environment()
    tsa_url = env.tsa_url
    revocation = _revocation_urls(env.revocation_urls)
    for policy in policies:
        level = policy.sign.level
        if level is None:
            continue
        if level.timestamped and not tsa_url:
            raise ConfigError(
                f"policy {policy.name!r} asks sign.level {level.value}, which needs a timestamp authority: "
                "set DOCJOBS_TSA_URL"
            )
        if level.long_term and not revocation:
            raise ConfigError(
                f"policy {policy.name!r} asks sign.level {level.value}, which needs the OCSP responders and CRLs of "
                "the signer's and the TSA's chains: set DOCJOBS_REVOCATION_URLS"
            )


def _paths(raw: str | None) -> tuple[Path, ...]:
    return tuple(Path(part) for part in (raw or "").split(os.pathsep) if part)


def _check_files(setting: str, paths: Sequence[Path]) -> None:
    for path in paths:
        if not path.is_file():
            raise ConfigError(f"{setting}: {path} is not a readable file")
