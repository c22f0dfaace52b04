"""What each method takes, read from its interface description, and calls checked against it. Pure.

The varlink descriptions the sockets serve (``GetInterfaceDescription``, supervisor/api/idl.py)
are the one statement of every method's parameters. This module parses them (varlink.org,
"Interface Definition": ``bool``, ``int``, ``float``, ``string``, ``object``, ``?T``, ``[]T``,
``[string]T``, enums, structs and named types) and checks a call's parameters against its
method's before the method runs. So a parameter of the wrong type, in any method, including a
method added to a description later, is answered ``InvalidParameter`` naming it, never an
exception inside the verb (a ``resolution`` that was a list, a ``mismatchId``
past 64 bits).

* ``int`` is a signed 64-bit integer: varlink leaves its size to the implementation, "usually
  int64"; SQLite's INTEGER and systemd's sd-varlink hold it so. ``true`` is not an integer.
* ``float`` is a finite JSON number, an integer included.
* ``?T`` may be absent or ``null``; any other parameter must be present.
* Parameters a method does not declare are ignored, as the protocol ignores unknown fields.

Values beyond their type (an empty session id, an unknown resolution) remain the verb's to refuse.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from supervisor.api.idl import DESCRIPTIONS
from supervisor.api.protocol import ApiFault
from supervisor.errors import ApiError

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "SIGNATURES",
    "Field",
    "Interface",
    "Kind",
    "VType",
    "check_parameters",
    "parse_interface",
]

INT_MIN: Final = -(2**63)
INT_MAX: Final = 2**63 - 1


class Kind(enum.Enum):
    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    STRING = "string"
    OBJECT = "object"
    NULLABLE = "?"
    ARRAY = "[]"
    MAP = "[string]"
    STRUCT = "struct"
    ENUM = "enum"
    NAMED = "named"


_BUILTIN = {k.value: k for k in (Kind.BOOL, Kind.INT, Kind.FLOAT, Kind.STRING, Kind.OBJECT)}


@dataclass(frozen=True, slots=True)
class VType:
    """One varlink type: ``inner`` for ``?``, ``[]`` and ``[string]``; ``fields`` of a struct,
    ``names`` of an enum, ``name`` of a named type (resolved in its interface)."""

    kind: Kind
    inner: VType | None = None
    fields: tuple[Field, ...] = ()
    names: tuple[str, ...] = ()
    name: str = ""

    @property
    def nullable(self) -> bool:
        return self.kind is Kind.NULLABLE


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: VType


@dataclass(frozen=True, slots=True)
class Interface:
    """A parsed description: its name, named types, and each method's parameters (its input struct)."""

    name: str
    types: dict[str, VType] = field(default_factory=dict)
    methods: dict[str, tuple[Field, ...]] = field(default_factory=dict)


# -- parsing ---------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s+|#[^\n]*|(->|[\[\]():,?]|[A-Za-z][A-Za-z0-9_.\-]*)")


def _tokens(text: str) -> Iterator[str]:
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise ValueError(f"unexpected {text[position]!r} at offset {position}")
        position = match.end()
        if match.group(1) is not None:
            yield match.group(1)


class _Parser:
    def __init__(self, text: str) -> None:
        self._tokens = list(_tokens(text))
        self._at = 0

    def _peek(self, ahead: int = 0) -> str:
        index = self._at + ahead
        return self._tokens[index] if index < len(self._tokens) else ""

    def _take(self, expected: str | None = None) -> str:
        token = self._peek()
        if not token or (expected is not None and token != expected):
            raise ValueError(f"expected {expected or 'more'} at token {self._at}, got {token!r}")
        self._at += 1
        return token

    def interface(self) -> Interface:
        self._take("interface")
        parsed = Interface(self._take())
        while self._peek():
            keyword, name = self._take(), self._take()
            if keyword == "type":
                parsed.types[name] = self._struct_or_enum()
            elif keyword == "method":
                parameters = self._struct_or_enum()
                self._take("->")
                self._struct_or_enum()
                parsed.methods[name] = parameters.fields
            elif keyword == "error":
                self._struct_or_enum()
            else:
                raise ValueError(f"unknown keyword {keyword!r}")
        return parsed

    def _struct_or_enum(self) -> VType:
        self._take("(")
        if self._peek() == ")":
            self._take()
            return VType(Kind.STRUCT)
        if self._peek(1) != ":":
            names = [self._take()]
            while self._peek() == ",":
                self._take()
                names.append(self._take())
            self._take(")")
            return VType(Kind.ENUM, names=tuple(names))
        fields = [self._field()]
        while self._peek() == ",":
            self._take()
            fields.append(self._field())
        self._take(")")
        return VType(Kind.STRUCT, fields=tuple(fields))

    def _field(self) -> Field:
        name = self._take()
        self._take(":")
        return Field(name, self._type())

    def _type(self) -> VType:
        token = self._peek()
        if token == "?":
            self._take()
            return VType(Kind.NULLABLE, inner=self._type())
        if token == "[":
            self._take()
            if self._peek() == "]":
                self._take()
                return VType(Kind.ARRAY, inner=self._type())
            self._take("string")
            self._take("]")
            return VType(Kind.MAP, inner=self._type())
        if token == "(":
            return self._struct_or_enum()
        name = self._take()
        builtin = _BUILTIN.get(name)
        return VType(builtin) if builtin is not None else VType(Kind.NAMED, name=name)


def parse_interface(description: str) -> Interface:
    """Parse one varlink interface description; ValueError naming the token where it goes wrong."""
    return _Parser(description).interface()


#: "<interface>.<Method>" -> its parameters, for every method of every interface the daemon serves
SIGNATURES: Final[Mapping[str, tuple[Field, ...]]] = {
    f"{interface.name}.{method}": parameters
    for interface in map(parse_interface, DESCRIPTIONS.values())
    for method, parameters in interface.methods.items()
}
_TYPES: Final[Mapping[str, VType]] = {
    name: vtype
    for interface in map(parse_interface, DESCRIPTIONS.values())
    for name, vtype in interface.types.items()
}


# -- checking --------------------------------------------------------------------------------------


def _describe(vtype: VType) -> str:
    kind = vtype.kind
    if kind is Kind.NULLABLE:
        assert vtype.inner is not None
        return f"{_describe(vtype.inner)} or null"
    if kind is Kind.ARRAY:
        assert vtype.inner is not None
        return f"a list of {_plural(vtype.inner)}"
    if kind is Kind.MAP:
        assert vtype.inner is not None
        return f"an object of {_plural(vtype.inner)}"
    if kind is Kind.ENUM:
        return "one of " + ", ".join(vtype.names)
    return {
        Kind.BOOL: "true or false",
        Kind.INT: "an integer (64-bit)",
        Kind.FLOAT: "a number",
        Kind.STRING: "a string",
        Kind.OBJECT: "an object",
        Kind.STRUCT: "an object",
        Kind.NAMED: f"an object ({vtype.name})",
    }[kind]


def _plural(vtype: VType) -> str:
    simple = {Kind.BOOL: "booleans", Kind.INT: "integers", Kind.FLOAT: "numbers", Kind.STRING: "strings"}
    return simple.get(vtype.kind, "values")


def _wrong(parameter: str, path: str, vtype: VType) -> ApiError:
    return ApiError(
        ApiFault.INVALID_PARAMETER,
        {"parameter": parameter, "problem": f"{path}: expected {_describe(vtype)}"},
    )


def _check(value: Any, vtype: VType, parameter: str, path: str) -> None:
    kind = vtype.kind
    if kind is Kind.NULLABLE:
        assert vtype.inner is not None
        if value is not None:
            _check(value, vtype.inner, parameter, path)
        return
    if kind is Kind.NAMED:
        _check(value, _TYPES.get(vtype.name, VType(Kind.OBJECT)), parameter, path)
        return
    ok = {
        Kind.BOOL: lambda: isinstance(value, bool),
        Kind.INT: lambda: (
            isinstance(value, int) and not isinstance(value, bool) and INT_MIN <= value <= INT_MAX
        ),
        Kind.FLOAT: lambda: (
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        ),
        Kind.STRING: lambda: isinstance(value, str),
        Kind.OBJECT: lambda: isinstance(value, dict),
        Kind.STRUCT: lambda: isinstance(value, dict),
        Kind.ARRAY: lambda: isinstance(value, list),
        Kind.MAP: lambda: isinstance(value, dict),
        Kind.ENUM: lambda: isinstance(value, str) and value in vtype.names,
    }[kind]()
    if not ok:
        raise _wrong(parameter, path, vtype)
    if kind is Kind.ARRAY:
        assert vtype.inner is not None
        for index, item in enumerate(value):
            _check(item, vtype.inner, parameter, f"{path}[{index}]")
    elif kind is Kind.MAP:
        assert vtype.inner is not None
        for key, item in value.items():
            _check(item, vtype.inner, parameter, f"{path}.{str(key)[:50]}")
    elif kind is Kind.STRUCT:
        _check_fields(value, vtype.fields, parameter, path)


def _check_fields(values: Mapping[str, Any], fields: tuple[Field, ...], parameter: str, path: str) -> None:
    for declared in fields:
        where = f"{path}.{declared.name}" if path else declared.name
        name = parameter or declared.name
        value = values.get(declared.name)
        if value is None and not declared.type.nullable:
            raise ApiError(
                ApiFault.INVALID_PARAMETER,
                {"parameter": name, "problem": f"{where}: required ({_describe(declared.type)})"},
            )
        _check(value, declared.type, name, where)


def check_parameters(
    method: str, parameters: Mapping[str, Any], signatures: Mapping[str, tuple[Field, ...]] = SIGNATURES
) -> None:
    """Raise ``InvalidParameter`` (naming the parameter) unless ``parameters`` fit ``method``'s signature.

    A method no description declares passes (the socket's method check refuses it first).
    """
    fields = signatures.get(method)
    if fields is not None:
        _check_fields(parameters, fields, "", "")
