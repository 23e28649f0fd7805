"""A small Spark DDL parser for row schemas.

``StructType.fromDDL`` needs a JVM, which exists neither in the data source's Python worker nor on
executors, so row schemas given as text (``"id STRING, price DECIMAL(10,2)"``) are parsed here into
``pyspark.sql.types`` objects (those are plain Python and need no JVM).

Grammar (case-insensitive keywords)::

    schema := field ("," field)*
    field  := name [":"] type [NOT NULL] [COMMENT 'text']
    name   := identifier | `back quoted` (a doubled `` escapes a backquote)
    type   := STRING | VARCHAR(n) | CHAR(n) | BOOLEAN | TINYINT | SMALLINT | INT | INTEGER | BIGINT | LONG
            | FLOAT | REAL | DOUBLE | DECIMAL[(p[,s])] | DATE | TIMESTAMP | BINARY
            | ARRAY<type> | MAP<STRING, type> | STRUCT<field, ...>
"""

from __future__ import annotations

import re

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = ["DDLError", "parse_ddl", "to_ddl"]


class DDLError(ValueError):
    """A row schema DDL string that cannot be parsed; the message gives the position."""


_SIMPLE: dict[str, DataType] = {
    "STRING": StringType(),
    "BOOLEAN": BooleanType(),
    "BOOL": BooleanType(),
    "TINYINT": ByteType(),
    "BYTE": ByteType(),
    "SMALLINT": ShortType(),
    "SHORT": ShortType(),
    "INT": IntegerType(),
    "INTEGER": IntegerType(),
    "BIGINT": LongType(),
    "LONG": LongType(),
    "FLOAT": FloatType(),
    "REAL": FloatType(),
    "DOUBLE": DoubleType(),
    "DATE": DateType(),
    "TIMESTAMP": TimestampType(),
    "BINARY": BinaryType(),
}
_DECIMAL = ("DECIMAL", "DEC", "NUMERIC")
_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|('(?:[^'\\]|\\.)*')|([<>(),:]))")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []  # (kind, value, position)
        pos = 0
        while True:
            m = _TOKEN.match(text, pos)
            if m is None:
                rest = text[pos:]
                if rest.strip():
                    at = pos + len(rest) - len(rest.lstrip())
                    raise DDLError(f"row schema: unexpected character {text[at]!r} at position {at}")
                break
            assert m.lastindex is not None  # _TOKEN is one of five groups: a match sets one
            at = m.start(m.lastindex)
            kind = ("quoted", "ident", "int", "string", "punct")[m.lastindex - 1]
            value = m.group(m.lastindex)
            if kind == "quoted":
                value = value[1:-1].replace("``", "`")
            self.tokens.append((kind, value, at))
            pos = m.end()
        self.i = 0

    def _err(self, what: str) -> DDLError:
        if self.i < len(self.tokens):
            _kind, value, at = self.tokens[self.i]
            return DDLError(f"row schema: expected {what} at position {at}, found {value!r} in {self.text!r}")
        return DDLError(f"row schema: expected {what} at end of {self.text!r}")

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def accept(self, punct: str) -> bool:
        tok = self.peek()
        if tok is not None and tok[0] == "punct" and tok[1] == punct:
            self.i += 1
            return True
        return False

    def expect(self, punct: str) -> None:
        if not self.accept(punct):
            raise self._err(repr(punct))

    def keyword(self, word: str) -> bool:
        tok = self.peek()
        if tok is not None and tok[0] == "ident" and tok[1].upper() == word:
            self.i += 1
            return True
        return False

    def integer(self) -> int:
        tok = self.peek()
        if tok is None or tok[0] != "int":
            raise self._err("an integer")
        self.i += 1
        return int(tok[1])

    def fields(self, closing: str | None) -> StructType:
        out: list[StructField] = []
        seen: set[str] = set()
        if closing is not None and self.accept(closing):
            return StructType(out)
        while True:
            tok = self.peek()
            if tok is None or tok[0] not in ("ident", "quoted"):
                raise self._err("a column name")
            self.i += 1
            name = tok[1]
            if name in seen:
                raise DDLError(f"row schema: duplicate column name {name!r} at position {tok[2]}")
            seen.add(name)
            self.accept(":")
            dtype = self.dtype()
            nullable = True
            if self.keyword("NOT"):
                if not self.keyword("NULL"):
                    raise self._err("NULL after NOT")
                nullable = False
            metadata = None
            if self.keyword("COMMENT"):
                tok = self.peek()
                if tok is None or tok[0] != "string":
                    raise self._err("a quoted comment")
                self.i += 1
                metadata = {"comment": tok[1][1:-1]}
            out.append(StructField(name, dtype, nullable, metadata))
            if closing is not None and self.accept(closing):
                return StructType(out)
            if closing is None and self.peek() is None:
                return StructType(out)
            self.expect(",")

    def dtype(self) -> DataType:
        tok = self.peek()
        if tok is None or tok[0] != "ident":
            raise self._err("a type")
        word, at = tok[1].upper(), tok[2]
        self.i += 1
        if word in _SIMPLE:
            return _SIMPLE[word]
        if word in ("VARCHAR", "CHAR"):
            self.expect("(")
            self.integer()
            self.expect(")")
            return StringType()
        if word in _DECIMAL:
            precision, scale = 10, 0
            if self.accept("("):
                precision = self.integer()
                if self.accept(","):
                    scale = self.integer()
                self.expect(")")
            if not 1 <= precision <= 38 or not 0 <= scale <= precision:
                raise DDLError(
                    f"row schema: DECIMAL({precision},{scale}) at position {at} is invalid "
                    "(need 1 <= precision <= 38 and 0 <= scale <= precision)"
                )
            return DecimalType(precision, scale)
        if word == "ARRAY":
            self.expect("<")
            element = self.dtype()
            self.expect(">")
            return ArrayType(element, True)
        if word == "MAP":
            self.expect("<")
            key_at = self.peek()
            key = self.dtype()
            if not isinstance(key, StringType):
                raise DDLError(
                    f"row schema: MAP keys must be STRING (JSON object keys are strings), "
                    f"got {key.simpleString()} at position {key_at[2] if key_at else at}"
                )
            self.expect(",")
            value = self.dtype()
            self.expect(">")
            return MapType(key, value, True)
        if word == "STRUCT":
            self.expect("<")
            return self.fields(">")
        raise DDLError(f"row schema: unknown or unsupported type {tok[1]!r} at position {at} in {self.text!r}")


def parse_ddl(ddl: str) -> StructType:
    """Parse a Spark DDL column list (``"id STRING, price DECIMAL(10,2)"``) into a ``StructType``.

    Raises :class:`DDLError` (a ``ValueError``) naming the position of the first problem.
    """
    if not isinstance(ddl, str):
        raise TypeError(f"row schema must be a DDL string or a StructType, got {type(ddl).__name__}")
    parser = _Parser(ddl)
    if not parser.tokens:
        raise DDLError("row schema: the DDL string is empty")
    schema = parser.fields(None)
    return schema


_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def quote_identifier(name: str) -> str:
    return name if _PLAIN_NAME.match(name) else "`" + name.replace("`", "``") + "`"


def to_ddl(schema: StructType) -> str:
    """Render a ``StructType`` as a DDL column list that :func:`parse_ddl` reads back."""
    return ", ".join(
        f"{quote_identifier(f.name)} {_type_ddl(f.dataType)}" + ("" if f.nullable else " NOT NULL")
        for f in schema.fields
    )


def _type_ddl(dtype: DataType) -> str:
    if isinstance(dtype, StructType):
        return (
            "STRUCT<"
            + ", ".join(
                f"{quote_identifier(f.name)}: {_type_ddl(f.dataType)}" + ("" if f.nullable else " NOT NULL")
                for f in dtype.fields
            )
            + ">"
        )
    if isinstance(dtype, ArrayType):
        return f"ARRAY<{_type_ddl(dtype.elementType)}>"
    if isinstance(dtype, MapType):
        return f"MAP<{_type_ddl(dtype.keyType)}, {_type_ddl(dtype.valueType)}>"
    if isinstance(dtype, DecimalType):
        return f"DECIMAL({dtype.precision},{dtype.scale})"
    return dtype.simpleString().upper()
