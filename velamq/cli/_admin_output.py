"""What `velamq admin` needs besides its verbs and the HTTP client: pulsar-admin's units, and output.

    parse_time_s("1h") == 3600;  parse_size_bytes("10G") == 10 * 2**30
    render(value) -> text table;  render_json(value) -> indented JSON

The HTTP calls go through velamq.client.AdminClient, the one admin REST client of the package.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

_TIME_RE: Final = re.compile(r"(-?[0-9]+)([smhdwy]?)")
_TIME_UNITS_S: Final = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_SIZE_RE: Final = re.compile(r"(-?[0-9]+)([kKmMgGtT]?)")
_SIZE_UNITS: Final = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


# ---------------------------------------------------------------------------- units


def parse_time_s(text: str) -> int:
    """pulsar-admin's relative time: "30" or "30s", "10m", "1h", "2d", "1w", "1y"; "-1" stays -1."""
    match = _TIME_RE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"bad time {text!r}: use a number with s, m, h, d, w or y (e.g. 10m)")
    value = int(match.group(1))
    return value if value < 0 else value * _TIME_UNITS_S[match.group(2)]


def parse_size_bytes(text: str) -> int:
    """pulsar-admin's size: "4096", "10K", "16M", "1G", "3T" (powers of 1024); "-1" stays -1."""
    match = _SIZE_RE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"bad size {text!r}: use a number with K, M, G or T (e.g. 10G)")
    value = int(match.group(1))
    return value if value < 0 else value * _SIZE_UNITS[match.group(2).lower()]


# ---------------------------------------------------------------------------- output


def render_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=False)


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, dict | list)


def _flatten(value: Any, prefix: str, rows: list[tuple[str, str]]) -> None:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}" if prefix else str(key), rows)
    elif isinstance(value, list) and value and not all(_is_scalar(v) for v in value):
        for index, item in enumerate(value):
            _flatten(item, f"{prefix}.{index}" if prefix else str(index), rows)
    elif isinstance(value, list):
        rows.append((prefix, ", ".join(_scalar(v) for v in value)))
    elif isinstance(value, dict):
        rows.append((prefix, ""))
    else:
        rows.append((prefix, _scalar(value)))


def _columns(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def render(value: Any) -> str:
    """Text for a terminal: a list as one item a line, an object as a KEY VALUE table (nested keys
    joined with dots), a list of flat objects as columns."""
    if value is None:
        return "null"
    if _is_scalar(value):
        return _scalar(value)
    if not value:
        return "{}" if isinstance(value, dict) else ""
    if isinstance(value, list):
        if all(_is_scalar(v) for v in value):
            return "\n".join(_scalar(v) for v in value)
        if all(isinstance(v, dict) and all(_is_scalar(x) for x in v.values()) for v in value):
            header = list(dict.fromkeys(k for v in value for k in v))
            return _columns(header, [[_scalar(v.get(k, "")) for k in header] for v in value])
    rows: list[tuple[str, str]] = []
    _flatten(value, "", rows)
    return _columns(["key", "value"], [[k, v] for k, v in rows])
