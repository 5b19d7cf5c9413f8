"""Exact fit of a size measured at several (B, S) points to the layer-graph SizeExpr.

The layer-graph format (docs/layer-graph-format.md) allows only
    c + b*B + s*S + bs*B*S + ss*S^2 + bss*B*S^2
with integer coefficients. Six unknowns need six points: two batch sizes times
three sequence lengths. Every further point is a check: a size with a B^2 or S^3
term, or one that is not a polynomial at all (a bucketed workspace), disagrees
there and is refused rather than silently approximated.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Dict, List, Sequence, Tuple

from errors import ExporterError

Point = Tuple[int, int]  # (batch, seq)
TERMS = ("c", "b", "s", "bs", "ss", "bss")


@dataclass(frozen=True)
class SizeExpr:
    """Integer coefficients of the layer-graph polynomial; negative ones are allowed here."""

    c: int = 0
    b: int = 0
    s: int = 0
    bs: int = 0
    ss: int = 0
    bss: int = 0

    def at(self, batch: int, seq: int) -> int:
        return (self.c + self.b * batch + self.s * seq + self.bs * batch * seq
                + self.ss * seq * seq + self.bss * batch * seq * seq)

    def clamped(self) -> "SizeExpr":
        """Negative terms dropped: an upper bound for B, S >= 1, which the format needs."""
        return SizeExpr(*(max(0, getattr(self, t)) for t in TERMS))

    def has_negative(self) -> bool:
        return any(getattr(self, t) < 0 for t in TERMS)

    def to_json(self) -> object:
        """A plain integer for constants, otherwise the object without zero terms."""
        terms = {t: getattr(self, t) for t in TERMS if getattr(self, t) != 0}
        if not terms:
            return 0
        if list(terms) == ["c"]:
            return terms["c"]
        return terms


def _solve_quadratic(points: Sequence[Tuple[int, int]]) -> Tuple[Fraction, Fraction, Fraction]:
    """Coefficients (a0, a1, a2) of a0 + a1*x + a2*x^2 through three points (Lagrange)."""
    (x0, y0), (x1, y1), (x2, y2) = points
    a0 = a1 = a2 = Fraction(0)
    for xi, yi, xj, xk in ((x0, y0, x1, x2), (x1, y1, x0, x2), (x2, y2, x0, x1)):
        denom = Fraction((xi - xj) * (xi - xk))
        # yi * (x - xj)(x - xk) / denom
        a2 += yi / denom
        a1 += -yi * (xj + xk) / denom
        a0 += yi * xj * xk / denom
    return a0, a1, a2


def fit_points(batches: Sequence[int], seqs: Sequence[int]) -> List[Point]:
    """The six fitting points: every batch of the first two with every seq of the first three."""
    return [(b, s) for b in batches[:2] for s in seqs[:3]]


def fit_size(values: Dict[Point, int], batches: Sequence[int], seqs: Sequence[int],
             what: str) -> SizeExpr:
    """Fits `values` (measured at every point of fit_points plus check points) exactly.

    Raises ExporterError naming `what` when a coefficient is not an integer or a
    check point disagrees.
    """
    per_batch = []
    for batch in batches[:2]:
        per_batch.append(_solve_quadratic([(s, values[(batch, s)]) for s in seqs[:3]]))
    (b0, b1) = batches[:2]
    coefficients = []
    for degree in range(3):
        y0, y1 = per_batch[0][degree], per_batch[1][degree]
        slope = (y1 - y0) / (b1 - b0)
        intercept = y0 - slope * b0
        coefficients.append((intercept, slope))
    raw = {"c": coefficients[0][0], "b": coefficients[0][1], "s": coefficients[1][0],
           "bs": coefficients[1][1], "ss": coefficients[2][0], "bss": coefficients[2][1]}
    for term, value in raw.items():
        if value.denominator != 1:
            raise ExporterError(
                f"{what}: the sizes measured at (B, S) = {sorted(values)} are not a polynomial "
                f"c + b*B + s*S + bs*B*S + ss*S^2 + bss*B*S^2 with integer coefficients "
                f"(term {term} = {value})")
    expr = SizeExpr(**{t: int(v) for t, v in raw.items()})
    for point, measured in values.items():
        if expr.at(*point) != measured:
            raise ExporterError(
                f"{what}: measured {measured} at (B, S) = {point} but the fit gives "
                f"{expr.at(*point)}: the size is not of the form "
                f"c + b*B + s*S + bs*B*S + ss*S^2 + bss*B*S^2")
    return expr
