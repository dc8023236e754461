"""Records for Avro and JSON schemas: the official Python client's `pulsar.schema` classes, rebuilt.

    class Order(Record):
        _avro_namespace = "shop"        # optional: the Avro namespace of the record
        _sorted_fields = False          # True: fields in alphabetical order in the schema
        id = Long(required=True)
        note = String(default="")       # optional fields are unions with null
        items = Array(String())
        status = Status                 # an enum.Enum class, or CustomEnum(Status, ...)
        customer = Customer()           # a nested Record (an instance; the class works too)

Order.schema() is the Avro record definition, equal, key for key and field for field, to what
pulsar-client 3.x generates for the same class, so that a velamq producer and an official consumer
register and match the same schema version. Mirrored on purpose:

- a field is `["null", <type>]` unless `required=True`; a "default" key is written only when
  `required_default=True` (so a plain `Integer(default=5)` is a default of the Python object only);
- a named type (record by `namespace.name`, enum by name) is defined at its first use and referred
  to by name afterwards;
- Array/Map items that are primitive fields, or CustomEnum ones, appear as their type name;
- assigning a value validates its type (TypeError); str is accepted for Bytes and bytes for String.

Differences: velamq raises TypeError for an unknown field name in the constructor (the official
client ignores it), and decoding ignores fields the reader's class does not declare.
"""

from __future__ import annotations

import builtins
import enum
from collections.abc import Mapping
from typing import Any, ClassVar

_RESERVED = ("_default", "_required", "_required_default")


def _name_of(x: Any) -> str:
    return str(getattr(x, "__name__", x))


class Field:
    """A typed field of a Record. `default`: the value of an unset field; `required`: not a union
    with null; `required_default`: write the default into the schema."""

    def __init__(self, default: Any = None, required: bool = False, required_default: bool = False) -> None:
        self._required = required
        self._required_default = required_default
        self._default = None
        if default is not None:
            default = self.validate_type("default", default)
        self._default = default

    def type(self) -> str:
        raise NotImplementedError

    def python_type(self) -> builtins.type[Any] | tuple[builtins.type[Any], ...]:
        raise NotImplementedError

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None and not self._required:
            return self.default()
        if not isinstance(val, self.python_type()):
            raise TypeError(f"Invalid type '{type(val)}' for field '{name}'. Expected: {_name_of(self.python_type())}")
        return val

    def schema(self) -> Any:
        return self.schema_info(set())

    def schema_info(self, defined_names: set[str]) -> Any:
        return self.type()

    def default(self) -> Any:
        return self._default

    def required_default(self) -> bool:
        return self._required_default

    def is_required(self) -> bool:
        return self._required


class Null(Field):
    def type(self) -> str:
        return "null"

    def python_type(self) -> builtins.type[Any]:
        return type(None)

    def validate_type(self, name: str, val: Any) -> Any:
        if val is not None:
            raise TypeError(f"Field {name} is set to be None")
        return val


class Boolean(Field):
    def type(self) -> str:
        return "boolean"

    def python_type(self) -> builtins.type[Any]:
        return bool

    def default(self) -> Any:
        return False if self._default is None else self._default


class Integer(Field):
    def type(self) -> str:
        return "int"

    def python_type(self) -> builtins.type[Any]:
        return int


class Long(Field):
    def type(self) -> str:
        return "long"

    def python_type(self) -> builtins.type[Any]:
        return int


class Float(Field):
    def type(self) -> str:
        return "float"

    def python_type(self) -> tuple[builtins.type[Any], ...]:
        return float, int


class Double(Field):
    def type(self) -> str:
        return "double"

    def python_type(self) -> tuple[builtins.type[Any], ...]:
        return float, int


class Bytes(Field):
    def type(self) -> str:
        return "bytes"

    def python_type(self) -> tuple[builtins.type[Any], ...]:
        return bytes, str

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None and not self._required:
            return self.default()
        if isinstance(val, str):
            return val.encode()
        if not isinstance(val, bytes):
            raise TypeError(f"Invalid type '{type(val)}' for field '{name}'. Expected: bytes")
        return val


class String(Field):
    def type(self) -> str:
        return "string"

    def python_type(self) -> tuple[builtins.type[Any], ...]:
        return str, bytes

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None and not self._required:
            return self.default()
        if not isinstance(val, str | bytes):
            raise TypeError(f"Invalid type '{type(val)}' for field '{name}'. Expected a string")
        return val.decode() if isinstance(val, bytes) else val


class CustomEnum(Field):
    """An enum.Enum as an Avro enum: its member names are the symbols (JSON carries the values)."""

    def __init__(
        self, enum_type: type[enum.Enum], default: Any = None, required: bool = False, required_default: bool = False
    ) -> None:
        if not (isinstance(enum_type, type) and issubclass(enum_type, enum.Enum)):
            raise TypeError(f"{_name_of(enum_type)} is not a valid Enum type")
        self.enum_type = enum_type
        self.values = {member.value: member for member in enum_type.__members__.values()}
        super().__init__(default, required, required_default)

    def type(self) -> str:
        return "enum"

    def python_type(self) -> builtins.type[Any]:
        return self.enum_type

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None:
            return None
        if type(val) is str:
            if val in self.enum_type.__members__:
                return self.enum_type.__members__[val]
            symbols = list(self.enum_type.__members__)
            raise TypeError(f"Invalid enum value '{val}' for field '{name}'. Expected: {symbols}")
        if type(val) is int:
            if val in self.values:
                return self.values[val]
            raise TypeError(f"Invalid enum value '{val}' for field '{name}'. Expected: {list(self.values)}")
        if not isinstance(val, self.enum_type):
            raise TypeError(f"Invalid type '{type(val)}' for field '{name}'. Expected: {_name_of(self.enum_type)}")
        return val

    def schema_info(self, defined_names: set[str]) -> Any:
        name = self.enum_type.__name__
        if name in defined_names:
            return name
        defined_names.add(name)
        return {"type": "enum", "name": name, "symbols": [member.name for member in self.enum_type]}


def _item_schema(item: FieldLike, defined_names: set[str]) -> Any:
    # As the official client: nested Array/Map/Record items are defined, any other field by type name.
    return item.schema_info(defined_names) if isinstance(item, Array | Map | Record) else item.type()


def _check_item(x: Any) -> FieldLike:
    if isinstance(x, type) and issubclass(x, Record):
        return x()
    if not isinstance(x, Field | Record):
        raise TypeError(f"Argument {_name_of(x)} is not a Record or a Field")
    return x


class Array(Field):
    def __init__(self, array_type: Any, default: Any = None, required: bool = False,
                 required_default: bool = False) -> None:
        self.array_type = _check_item(array_type)
        super().__init__(default, required, required_default)

    def type(self) -> str:
        return "array"

    def python_type(self) -> builtins.type[Any]:
        return list

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None:
            return None
        super().validate_type(name, val)
        for item in val:
            if not isinstance(item, self.array_type.python_type()):
                raise TypeError(f"Array field {name} items should all be of type {_name_of(self.array_type.type())}")
        return val

    def schema_info(self, defined_names: set[str]) -> Any:
        return {"type": "array", "items": _item_schema(self.array_type, defined_names)}


class Map(Field):
    def __init__(self, value_type: Any, default: Any = None, required: bool = False,
                 required_default: bool = False) -> None:
        self.value_type = _check_item(value_type)
        super().__init__(default, required, required_default)

    def type(self) -> str:
        return "map"

    def python_type(self) -> builtins.type[Any]:
        return dict

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None:
            return None
        super().validate_type(name, val)
        for key, item in val.items():
            if not isinstance(key, str):
                raise TypeError(f"Map keys for field {name} should all be strings")
            if not isinstance(item, self.value_type.python_type()):
                raise TypeError(
                    f"Map values for field {name} should all be of type {_name_of(self.value_type.python_type())}"
                )
        return val

    def schema_info(self, defined_names: set[str]) -> Any:
        return {"type": "map", "values": _item_schema(self.value_type, defined_names)}


class RecordMeta(type):
    """Collects a Record subclass's fields, in declaration order, into `_fields`."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> RecordMeta:
        if bases:  # not Record itself
            fields: dict[str, FieldLike] = {}
            for key, value in namespace.items():
                if isinstance(value, type) and issubclass(value, enum.Enum):
                    value = CustomEnum(value)
                elif isinstance(value, RecordMeta):
                    value = value()  # a nested record given as its class
                if isinstance(value, Field | Record):
                    fields[key] = value
            namespace["_fields"] = fields
            namespace["_required"] = False
        return super().__new__(mcs, name, bases, namespace)


class Record(metaclass=RecordMeta):
    """A record value, and (as an instance inside another Record) a field holding one."""

    _fields: ClassVar[dict[str, FieldLike]] = {}
    _avro_namespace: ClassVar[str | None] = None
    _sorted_fields: ClassVar[bool] = False

    def __init__(self, default: Any = None, required_default: bool = False, required: bool = False,
                 **kwargs: Any) -> None:
        object.__setattr__(self, "_required_default", required_default)
        object.__setattr__(self, "_default", default)
        object.__setattr__(self, "_required", required)
        unknown = set(kwargs) - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field(s) {sorted(unknown)}")
        for key, field in self._fields.items():
            if key in kwargs:
                self.__setattr__(key, _from_plain(field, kwargs[key]))
            elif isinstance(field, Record):
                self.__setattr__(key, field)  # as the official client: the nested record's template
            else:
                object.__setattr__(self, key, field.default())

    @classmethod
    def schema(cls) -> Any:
        return cls.schema_info(set())

    @classmethod
    def schema_info(cls, defined_names: set[str]) -> Any:
        full_name = f"{cls._avro_namespace}.{cls.__name__}" if cls._avro_namespace is not None else cls.__name__
        if full_name in defined_names:
            return full_name
        defined_names.add(full_name)
        schema: dict[str, Any] = {"type": "record", "name": cls.__name__}
        if cls._avro_namespace is not None:
            schema["namespace"] = cls._avro_namespace
        fields: list[dict[str, Any]] = []
        names = sorted(cls._fields) if cls._sorted_fields else list(cls._fields)
        for name in names:
            field = cls._fields[name]
            field_type = field.schema_info(defined_names)
            if not field.is_required():
                field_type = ["null", field_type]
            if field.required_default():
                default = field.default()
                fields.append({"name": name, "default": default.name if isinstance(default, enum.Enum) else default,
                               "type": field_type})
            else:
                fields.append({"name": name, "type": field_type})
        schema["fields"] = fields
        return schema

    def __setattr__(self, key: str, value: Any) -> None:
        if key in _RESERVED:
            object.__setattr__(self, key, value)
            return
        if key not in self._fields:
            raise AttributeError(f"Cannot set undeclared field {key} on record")
        object.__setattr__(self, key, self._fields[key].validate_type(key, value))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name, None) for name in self._fields)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self._fields)})"

    def to_dict(self) -> dict[str, Any]:
        """The field values by name, in declaration order (nested records stay records)."""
        return {name: getattr(self, name) for name in self._fields}

    # ---- the field interface, for a Record instance used as a field of another Record

    def type(self) -> str:
        return type(self).__name__

    def python_type(self) -> builtins.type[Any]:
        return type(self)

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None and not self._required:
            return self.default()
        if not isinstance(val, type(self)):
            expected = type(self).__name__
            raise TypeError(f"Invalid type '{type(val)}' for sub-record field '{name}'. Expected: {expected}")
        return val

    def default(self) -> Any:
        return self._default

    def required_default(self) -> bool:
        return bool(self._required_default)

    def is_required(self) -> bool:
        return bool(self._required)

    _required: bool
    _required_default: bool
    _default: Any


FieldLike = Field | Record


def _from_plain(field: FieldLike, value: Any) -> Any:
    """Decoded data holds nested records as dicts: build the declared Record classes from them."""
    if isinstance(field, Record) and isinstance(value, Mapping):
        return type(field)(**_known(type(field), value))
    if isinstance(field, Array) and isinstance(field.array_type, Record) and isinstance(value, list):
        cls = type(field.array_type)
        return [cls(**_known(cls, v)) if isinstance(v, Mapping) else v for v in value]
    if isinstance(field, Map) and isinstance(field.value_type, Record) and isinstance(value, Mapping):
        cls = type(field.value_type)
        return {k: cls(**_known(cls, v)) if isinstance(v, Mapping) else v for k, v in value.items()}
    return value


def _known(cls: type[Record], values: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of `values` that are fields of `cls` (data of a newer writer may have more)."""
    return {k: v for k, v in values.items() if k in cls._fields}


def record_from_dict(cls: type[Record], values: Mapping[str, Any]) -> Record:
    """A `cls` record from decoded data, ignoring fields `cls` does not declare."""
    return cls(**_known(cls, values))
