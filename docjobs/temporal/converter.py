"""The data converter every docjobs process shares: pydantic JSON payloads, sealed when codec keys are set."""

from __future__ import annotations

import dataclasses

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter

from docjobs.temporal.settings import TemporalSettings


def data_converter(settings: TemporalSettings) -> DataConverter:
    """Pydantic JSON payloads, encrypted when codec keys are configured (docjobs/temporal/codec.py)."""
    codec = settings.payload_codec()
    return dataclasses.replace(pydantic_data_converter, payload_codec=codec) if codec else pydantic_data_converter
