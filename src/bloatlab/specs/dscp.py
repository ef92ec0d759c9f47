"""DSCP codepoints by name (RFC 2474, 2597, 3246, 4594, 5865, 8622), and ECN codepoints by name
(RFC 3168, 9331): the one place a spec's `dscp = "EF"` and `ecn = "ect1"` are read. The DSCP is
six bits; the IP header's TOS byte carries it shifted left by two, beside the two ECN bits.
"""

from __future__ import annotations

from bloatlab.errors import SpecError, show

NAMES = {
    "BE": 0, "CS0": 0, "LE": 1,  # default; lower effort (RFC 8622)
    **{f"CS{n}": 8 * n for n in range(1, 8)},  # class selectors; CS1 is Flent's "BK"
    "BK": 8,
    **{f"AF{c}{p}": 8 * c + 2 * p for c in range(1, 5) for p in range(1, 4)},  # assured forwarding
    "VA": 44, "EF": 46,  # voice admit (RFC 5865); expedited forwarding (RFC 3246)
}


def parse_dscp(value: object, where: str) -> int:
    """A codepoint from a name ("EF", any case) or a number 0-63."""
    if isinstance(value, str) and value.strip().upper() in NAMES:
        return NAMES[value.strip().upper()]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 63:
        return value
    raise SpecError(f"{show(value)} is not a DSCP; write a codepoint 0-63 or a name such as BE, BK, CS5, EF or AF41",
                    field=where)


def name(codepoint: int) -> str:
    """The usual name of a codepoint ("EF"), or its number as text."""
    preferred = {0: "BE", 8: "BK"}  # Flent's names for RRUL's marks
    if codepoint in preferred:
        return preferred[codepoint]
    return next((n for n, c in NAMES.items() if c == codepoint), str(codepoint))


# The two ECN bits by the names specs and the datapath's stats use (the stats write "not_ect").
ECN = {"not-ect": 0, "ect1": 1, "ect0": 2, "ce": 3}


def parse_ecn(value: object, where: str) -> str:
    """An ECN codepoint by its name (any case)."""
    if isinstance(value, str) and value.strip().lower() in ECN:
        return value.strip().lower()
    raise SpecError(f"{show(value)} is not an ECN codepoint; write one of: {', '.join(ECN)}", field=where)


def tos(codepoint: int, ecn: str = "not-ect") -> int:
    """The TOS byte that carries the DSCP and the ECN codepoint: what ping -Q and irtt take."""
    return codepoint << 2 | ECN[ecn]
