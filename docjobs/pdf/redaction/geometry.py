"""Affine matrices and overlap tests for content redaction, in PDF's row-vector convention.

A point p maps to p x M; `multiply(a, b)` is "first a, then b", so the text rendering matrix of a glyph
is multiply(font_scale, multiply(Tm, CTM)). Overlap means a common area wider than OVERLAP_TOLERANCE:
a glyph that merely touches a region's edge (the next word after a match, whose box starts where the
match's box ends, up to rounding) is not under it.
"""

from __future__ import annotations

import math

from docjobs.pdf.redaction.regions import Rect

Matrix = tuple[float, float, float, float, float, float]
Point = tuple[float, float]
IDENTITY: Matrix = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)
_EPSILON = 1e-9
OVERLAP_TOLERANCE = 1e-3  # points; far below anything visible, above the rounding of box coordinates


def multiply(m: Matrix, n: Matrix) -> Matrix:
    a, b, c, d, e, f = m
    p, q, r, s, t, u = n
    return (a * p + b * r, a * q + b * s, c * p + d * r, c * q + d * s, e * p + f * r + t, e * q + f * s + u)


def translate(tx: float, ty: float) -> Matrix:
    return (1.0, 0.0, 0.0, 1.0, tx, ty)


def apply(m: Matrix, x: float, y: float) -> Point:
    return (x * m[0] + y * m[2] + m[4], x * m[1] + y * m[3] + m[5])


def invert(m: Matrix) -> Matrix | None:
    a, b, c, d, e, f = m
    det = a * d - b * c
    if abs(det) < _EPSILON:
        return None
    ia, ib, ic, id_ = d / det, -b / det, -c / det, a / det
    return (ia, ib, ic, id_, -(e * ia + f * ic), -(e * ib + f * id_))


def corners(m: Matrix, x0: float, y0: float, x1: float, y1: float) -> list[Point]:
    """The rectangle [x0, x1] x [y0, y1] of m's source space as a parallelogram, corners in order."""
    return [apply(m, x0, y0), apply(m, x1, y0), apply(m, x1, y1), apply(m, x0, y1)]


def quad_hits(quad: list[Point], rect: Rect) -> bool:
    """Whether a parallelogram and a rectangle share a positive area (separating axis test).

    A degenerate parallelogram (a zero-width glyph, a zero font size) has no area; it counts as under
    the rectangle when it touches it at all, so nothing without area slips through."""
    xs, ys = [x for x, _ in quad], [y for _, y in quad]
    if max(xs) < rect.x0 or min(xs) > rect.x1 or max(ys) < rect.y0 or min(ys) > rect.y1:
        return False  # apart on an axis of the page: most glyphs, decided without the full test
    (x0, y0), (x1, y1), (x2, y2) = quad[0], quad[1], quad[2]
    degenerate = abs((x1 - x0) * (y2 - y1) - (y1 - y0) * (x2 - x1)) < _EPSILON
    rect_points = [(rect.x0, rect.y0), (rect.x1, rect.y0), (rect.x1, rect.y1), (rect.x0, rect.y1)]
    for ax, ay in ((1.0, 0.0), (0.0, 1.0), (y0 - y1, x1 - x0), (y1 - y2, x2 - x1)):
        length = math.hypot(ax, ay)
        if length < _EPSILON:
            continue
        quad_side = [(x * ax + y * ay) / length for x, y in quad]
        rect_side = [(x * ax + y * ay) / length for x, y in rect_points]
        overlap = min(max(quad_side), max(rect_side)) - max(min(quad_side), min(rect_side))
        if overlap < 0 or (not degenerate and overlap <= OVERLAP_TOLERANCE):
            return False
    return True


def strip_hits(m: Matrix, y0: float, y1: float, rect: Rect) -> bool:
    """Whether the band y0..y1 of m's source space, unbounded along x, touches the rectangle.

    Used where a glyph's position along its baseline is unknown: it is somewhere on that band."""
    ux, uy = m[0], m[1]
    if abs(ux) < _EPSILON and abs(uy) < _EPSILON:
        return True
    nx, ny = -uy, ux
    band = [x * nx + y * ny for x, y in (apply(m, 0.0, y0), apply(m, 0.0, y1))]
    rect_side = [x * nx + y * ny for x in (rect.x0, rect.x1) for y in (rect.y0, rect.y1)]
    return not (max(band) < min(rect_side) or max(rect_side) < min(band))
