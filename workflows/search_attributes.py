"""Search attributes that let operators filter jobs in the Web UI and through visibility."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

STATE = SearchAttributeKey.for_keyword("DocjobsState")
STAGE = SearchAttributeKey.for_keyword("DocjobsStage")
TENANT = SearchAttributeKey.for_keyword("DocjobsTenant")
DOCUMENT_CLASS = SearchAttributeKey.for_keyword("DocjobsDocumentClass")
NEXT_RENEWAL = SearchAttributeKey.for_datetime("DocjobsNextRenewal")  # an archive's (workflows/archive.py)

ALL = (STATE, STAGE, TENANT, DOCUMENT_CLASS, NEXT_RENEWAL)

# For `temporal server start-dev --search-attribute NAME=TYPE` and `temporal operator search-attribute create`.
REGISTRATION = (
    *(f"{key.name}=Keyword" for key in (STATE, STAGE, TENANT, DOCUMENT_CLASS)),
    f"{NEXT_RENEWAL.name}=Datetime",
)
