"""Can data written with one Avro schema be read with another? The rules of the Avro specification's
"Schema Resolution" section (1.11), applied to whole schemas instead of one datum at a time.

Parsing is fastavro's (`parse_avro`); this module only walks two parsed schemas side by side. The
writer's schema W and the reader's schema R match when:

- both are the same primitive type, or W promotes to R: int -> long, float, double;
  long -> float, double; float -> double; string <-> bytes;
- both are arrays (items resolve) or maps (values resolve);
- both are enums with the same unqualified name (or R lists W's full name among its aliases), and
  every symbol of W is a symbol of R, unless R has a default symbol;
- both are fixed with the same name (or alias) and size;
- both are records: fields match by name, or by a reader field's alias; a field of both resolves
  recursively; a field only W has is skipped; a field only R has needs a default in R;
- W is a union: every branch of W must resolve against R (any of them may be written);
- R is a union (W is not): the first branch of R that matches W, by type for unnamed types, by name
  for named ones, then (records) the first whose fields resolve, then by promotion.

One deliberate difference from the letter of the specification, so that velamq accepts what Pulsar
accepts: two records resolve whatever their names (Avro's Java resolver, which Pulsar uses, does not
compare record names either, and the official Python client's classes User1 and User2 are two
versions of one topic's schema). Record names still decide which branch of a union a record selects.
Logical types are read as their underlying type, as in Avro's resolution. Recursive schemas end: a
pair of records already being compared counts as compatible (co-inductively).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

import fastavro
from fastavro.schema import SchemaParseException

from velamq.metadata._schema_info import InvalidSchemaDataError

PRIMITIVES: Final = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED: Final = frozenset({"record", "error", "enum", "fixed"})
PROMOTIONS: Final = frozenset({
    ("int", "long"), ("int", "float"), ("int", "double"),
    ("long", "float"), ("long", "double"),
    ("float", "double"),
    ("string", "bytes"), ("bytes", "string"),
})


@dataclass(frozen=True, slots=True)
class ParsedAvro:
    """A schema parsed by fastavro, with the named types it defines (full name -> definition)."""

    schema: Any
    named: dict[str, Any] = field(default_factory=dict)


def parse_avro(definition: bytes | str) -> ParsedAvro:
    """Parse Avro schema JSON; InvalidSchemaDataError if it is not JSON or not a valid Avro schema."""
    try:
        raw = json.loads(definition)
    except ValueError as exc:
        raise InvalidSchemaDataError(f"schema definition is not JSON: {exc}") from None
    named: dict[str, Any] = {}
    try:
        parsed = fastavro.parse_schema(raw, named_schemas=named, _write_hint=False)
    except (SchemaParseException, TypeError, ValueError, KeyError, AttributeError) as exc:
        # fastavro signals a malformed schema by SchemaParseException, or by the error its walk
        # raises on an unexpected shape (a list where a dict is expected, a missing key).
        raise InvalidSchemaDataError(f"not a valid Avro schema: {type(exc).__name__}: {exc}") from None
    problem = _structure_problem(parsed, set())
    if problem is not None:
        raise InvalidSchemaDataError(f"not a valid Avro schema: {problem}")
    return ParsedAvro(parsed, named)


def _structure_problem(schema: Any, seen: set[str]) -> str | None:
    """What the specification forbids and fastavro lets through: empty or nested unions, a union with
    two branches of one unnamed type, duplicate enum symbols or field names."""
    if isinstance(schema, list):
        if not schema:
            return "an empty union"
        kinds = [_kind(b) if _kind(b) not in NAMED else f"{_kind(b)} {b['name']}" for b in schema
                 if not isinstance(b, str) or b in PRIMITIVES]
        if "union" in kinds:
            return "a union directly inside a union"
        if len(kinds) != len(set(kinds)):
            return f"a union with two branches of one type: {kinds}"
        return next((p for p in (_structure_problem(b, seen) for b in schema) if p), None)
    if not isinstance(schema, dict) or schema["type"] in PRIMITIVES:
        return None
    kind = _kind(schema)
    if kind in NAMED:
        if schema["name"] in seen:
            return None
        seen.add(schema["name"])
    if kind == "enum":
        symbols = schema["symbols"]
        if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
            return f"enum {schema['name']}: symbols must be a list of strings"
        if len(symbols) != len(set(symbols)):
            return f"enum {schema['name']}: duplicate symbols"
    elif kind == "record":
        names = [f["name"] for f in schema["fields"]]
        if len(names) != len(set(names)):
            return f"record {schema['name']}: duplicate field names"
        return next((p for p in (_structure_problem(f["type"], seen) for f in schema["fields"]) if p), None)
    elif kind == "array":
        return _structure_problem(schema["items"], seen)
    elif kind == "map":
        return _structure_problem(schema["values"], seen)
    return None


def resolution_problem(writer: ParsedAvro, reader: ParsedAvro) -> str | None:
    """None if every datum written with `writer` can be read with `reader`; else why not."""
    return _Resolver(writer.named, reader.named).check(writer.schema, reader.schema, "")


def canonical(parsed: ParsedAvro) -> Any:
    """The schema without what does not change its meaning (doc, aliases, ascending order), so that
    two spellings of one schema compare equal (as Avro's Schema.equals does)."""
    return _strip(parsed.schema)


def _strip(node: Any) -> Any:
    if isinstance(node, list):
        return [_strip(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strip(v) for k, v in node.items() if k not in ("doc", "aliases")}
    if out.get("order") == "ascending":
        del out["order"]
    return out


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        kind = schema["type"]
        return "record" if kind == "error" else str(kind)
    return str(schema)


def _short(full_name: str) -> str:
    return full_name.rsplit(".", 1)[-1]


def _aliases(schema: dict[str, Any]) -> set[str]:
    """The full names a named type's aliases stand for (relative ones take the type's namespace)."""
    namespace = schema["name"].rsplit(".", 1)[0] if "." in schema["name"] else ""
    return {a if "." in a or not namespace else f"{namespace}.{a}" for a in schema.get("aliases", ())}


def _names_match(writer: dict[str, Any], reader: dict[str, Any]) -> bool:
    return _short(writer["name"]) == _short(reader["name"]) or writer["name"] in _aliases(reader)


def _describe(schema: Any) -> str:
    kind = _kind(schema)
    if kind in NAMED:
        return f"{kind} {schema['name']}"
    if kind == "union":
        return "union [" + ", ".join(_describe(branch) for branch in schema) + "]"
    return kind


class _Resolver:
    """One writer/reader comparison: the two schemas' named types and the record pairs in progress."""

    def __init__(self, writer_named: dict[str, Any], reader_named: dict[str, Any]) -> None:
        self._writer_named = writer_named
        self._reader_named = reader_named
        self._in_progress: set[tuple[str, str]] = set()

    def _deref(self, schema: Any, named: dict[str, Any]) -> Any:
        if isinstance(schema, str) and schema not in PRIMITIVES:
            return named[schema]
        if isinstance(schema, dict) and schema["type"] in PRIMITIVES:
            return schema["type"]  # {"type": "int", "logicalType": ...} reads as int
        return schema

    def check(self, writer: Any, reader: Any, path: str) -> str | None:
        w = self._deref(writer, self._writer_named)
        r = self._deref(reader, self._reader_named)
        wk, rk = _kind(w), _kind(r)
        if wk == "union":
            for branch in w:
                problem = self.check(branch, r, path)
                if problem is not None:
                    return problem
            return None
        if rk == "union":
            branch = self._select_branch(w, r)
            if branch is None:
                where = path or "schema"
                return f"{where}: the writer's {_describe(w)} matches no branch of the reader's {_describe(r)}"
            return self.check(w, branch, path)
        if wk == rk:
            return self._same_kind(wk, w, r, path)
        if (wk, rk) in PROMOTIONS:
            return None
        return f"{path or 'schema'}: the writer's {_describe(w)} cannot be read as {_describe(r)}"

    def _same_kind(self, kind: str, w: Any, r: Any, path: str) -> str | None:
        where = path or "schema"
        if kind == "array":
            return self.check(w["items"], r["items"], f"{path}[]")
        if kind == "map":
            return self.check(w["values"], r["values"], f"{path}{{}}")
        if kind == "record":
            return self._records(w, r, path)
        if kind == "enum":
            if not _names_match(w, r):
                return f"{where}: enum {w['name']} cannot be read as enum {r['name']} (names differ)"
            missing = [s for s in w["symbols"] if s not in r["symbols"]]
            if missing and "default" not in r:
                return f"{where}: enum {r['name']} of the reader lacks symbols {missing} and has no default"
            return None
        if kind == "fixed":
            if not _names_match(w, r):
                return f"{where}: fixed {w['name']} cannot be read as fixed {r['name']} (names differ)"
            if w["size"] != r["size"]:
                return f"{where}: fixed {w['name']} has {w['size']} bytes, the reader's {r['size']}"
        return None

    def _records(self, w: dict[str, Any], r: dict[str, Any], path: str) -> str | None:
        pair = (w["name"], r["name"])
        if pair in self._in_progress:
            return None  # a recursive reference: compatible unless another part says otherwise
        self._in_progress.add(pair)
        try:
            writer_fields = {f["name"]: f for f in w["fields"]}
            for reader_field in r["fields"]:
                name = reader_field["name"]
                written = writer_fields.get(name) or next(
                    (writer_fields[a] for a in reader_field.get("aliases", ()) if a in writer_fields), None
                )
                field_path = f"{path}.{name}" if path else f"field {name!r}"
                if written is None:
                    if "default" not in reader_field:
                        return f"{field_path}: the reader's field has no default and the writer has no such field"
                    continue
                problem = self.check(written["type"], reader_field["type"], field_path)
                if problem is not None:
                    return problem
            return None
        finally:
            self._in_progress.discard(pair)

    def _select_branch(self, w: Any, union: list[Any]) -> Any:
        """The branch of the reader's union a datum of `w` is read as, or None."""
        wk = _kind(w)
        branches = [self._deref(b, self._reader_named) for b in union]
        for branch in branches:
            if _kind(branch) == wk and (wk not in NAMED or _names_match(w, branch)):
                return branch
        if wk == "record":
            for branch in branches:
                if _kind(branch) == "record" and self._records(w, branch, "") is None:
                    return branch
        for branch in branches:
            if (wk, _kind(branch)) in PROMOTIONS:
                return branch
        return None
