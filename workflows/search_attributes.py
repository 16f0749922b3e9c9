"""Search attributes that let operators filter jobs in the Web UI and through visibility."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

STATE = SearchAttributeKey.for_keyword("DocjobsState")
STAGE = SearchAttributeKey.for_keyword("DocjobsStage")
TENANT = SearchAttributeKey.for_keyword("DocjobsTenant")
DOCUMENT_CLASS = SearchAttributeKey.for_keyword("DocjobsDocumentClass")

ALL = (STATE, STAGE, TENANT, DOCUMENT_CLASS)

# For `temporal server start-dev --search-attribute NAME=Keyword` and `temporal operator search-attribute create`.
REGISTRATION = tuple(f"{key.name}=Keyword" for key in ALL)
