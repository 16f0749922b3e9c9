"""Reading content streams for redaction: refuse what the parser had to repair, check operands.

A rewrite writes back only what was parsed, so content the parser skipped would silently vanish (or,
worse, a glyph it skipped could never be judged): such a stream is refused with UnsafePage instead.
"""

from __future__ import annotations

import warnings
from decimal import Decimal

import pikepdf

from docjobs.pdf.budgets import OperatorBudget
from docjobs.pdf.redaction.geometry import Matrix
from docjobs.pdf.redaction.regions import UnsafePage
from docjobs.pdf.redaction.resources import Instruction


def parse_instructions(owner: pikepdf.Page | pikepdf.Stream, budget: OperatorBudget) -> list[Instruction]:
    """The content stream's instructions, once `budget` allows for them (it raises `input.too_complex`).
    The parser skips what it cannot read (an unterminated string drops the rest of the stream), so a
    stream it had to repair is refused rather than rewritten."""
    budget.spend(owner)
    page = owner if isinstance(owner, pikepdf.Page) else pikepdf.Page(pikepdf.Dictionary(Contents=owner))
    tokens = _BadTokens()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            page.get_filtered_contents(tokens)
            instructions = list(pikepdf.parse_content_stream(owner))
        except (pikepdf.PdfError, pikepdf.PdfParsingError):
            raise UnsafePage("unparsable_content") from None
    unreadable = any(
        operand is None
        for instruction in instructions
        if isinstance(instruction, pikepdf.ContentStreamInstruction)
        for operand in instruction.operands
    )
    if caught or tokens.found or unreadable:
        raise UnsafePage("unparsable_content")
    return instructions


class _BadTokens(pikepdf.TokenFilter):
    """Notes whether the tokenizer met anything it could not read."""

    def __init__(self) -> None:
        super().__init__()
        self.found = False

    def handle_token(self, token: pikepdf.Token = ...) -> pikepdf.Token:  # type: ignore[assignment]
        self.found |= token.type_ == pikepdf.TokenType.bad
        return token


def numbers(operands: list[pikepdf.Object], count: int) -> list[float]:
    if len(operands) != count:
        raise UnsafePage("unparsable_content")
    try:
        return [float(value) for value in operands]
    except (TypeError, ValueError):
        raise UnsafePage("unparsable_content") from None


def matrix_operand(instruction: pikepdf.ContentStreamInstruction) -> Matrix:
    return matrix_of(list(instruction.operands))


def matrix_of(values: list[pikepdf.Object]) -> Matrix:
    a, b, c, d, e, f = numbers(values, 6)
    return (a, b, c, d, e, f)


def make_instruction(operator: str, *operands: pikepdf.Object | Decimal | int) -> pikepdf.ContentStreamInstruction:
    return pikepdf.ContentStreamInstruction(list(operands), pikepdf.Operator(operator))
