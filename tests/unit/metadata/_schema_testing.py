"""Shared by the schema tests: a hypothesis strategy for valid Avro schemas."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

PRIMITIVES = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"]


@st.composite
def avro_schemas(draw: st.DrawFn) -> Any:
    """Random valid schemas: every kind, nesting, unions of distinct kinds, recursion by name."""
    counter = iter(range(10_000))

    def named(kind: str) -> str:
        return f"{kind}{next(counter)}"

    def node(depth: int) -> Any:
        choice = draw(st.integers(0, 7 if depth < 3 else 1))
        if choice <= 1:
            return draw(st.sampled_from(PRIMITIVES))
        if choice == 2:
            symbols = draw(st.lists(st.sampled_from("ABCDEF"), min_size=1, max_size=4, unique=True))
            return {"type": "enum", "name": named("E"), "symbols": symbols}
        if choice == 3:
            return {"type": "fixed", "name": named("F"), "size": draw(st.integers(0, 16))}
        if choice == 4:
            return {"type": "array", "items": node(depth + 1)}
        if choice == 5:
            return {"type": "map", "values": node(depth + 1)}
        if choice == 6:
            branches: dict[Any, Any] = {}  # one branch per kind (named kinds: per name), no nested union
            for candidate in (node(depth + 1) for _ in range(draw(st.integers(1, 3)))):
                if isinstance(candidate, list):
                    continue
                kind = candidate if isinstance(candidate, str) else (candidate["type"], candidate.get("name"))
                branches.setdefault(kind, candidate)
            return list(branches.values()) or ["null"]
        name = named("R")
        fields = [{"name": f"f{i}", "type": node(depth + 1)} for i in range(draw(st.integers(0, 4)))]
        if draw(st.booleans()):
            fields.append({"name": "self", "type": ["null", name], "default": None})
        return {"type": "record", "name": name, "fields": fields}

    return node(0)
