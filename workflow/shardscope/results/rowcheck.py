"""The rows of one collect checked as plain Python values, and handed to DuckDB as Arrow, without pandas.

A ``collect`` of one file spent most of its time in pandas: every check of :mod:`fastcheck`
is a few pandas operations of tens of microseconds each, on a frame of one to ten rows, and
a training document fills about 110 columns. This module reads the same pandera schemas
(once per process, through :func:`fastcheck.table_rule`) and applies them to the row dicts
directly: each value must already be of the Python type its column's dtype coerces to
without change (a ``str`` for a string column, an ``int`` within int64 for an integer one,
an ``int`` or ``float`` for a float one, a ``bool`` for a boolean one, ``None`` where the
column is nullable), nullability and uniqueness are counted in Python, and pandera's
builtin comparisons (``ge``, ``gt``, ``le``, ``lt``, ``eq``, ``ne``, ``in_range``,
``isin``, ``notin``, ``str_length``) are evaluated as the same comparisons on the values,
and so are the shared ``finite`` check on a numeric column (:func:`tablebase.finite_number`)
and the ``iso_time`` checks on a time of the common form (:func:`tablebase.iso_time_text`;
a time of another form fails it, and the rows go to pandera, which judges them).
Every other check (``finite`` on another column, ``str_matches``, each dataframe check) is
the very function pandera calls, given the small pandas Series or frame pandera would give
it. The rows that pass become an Arrow table typed from the schema.

It answers only "every row passes": :func:`arrow_rows` returns the table, or None when a
value is of any other type (one pandas would convert first: an ``int`` in a string column,
``3.0`` in an integer column, a NaN), when a check fails or raises, or when the schema uses
a feature not mirrored here. The caller then takes the pandas path (:func:`fastcheck.validate`,
whose pandera ``validate`` reports the problems and is the judge). So what this module
accepts is what pandera accepts, stored as the same values (tests/results/test_rowcheck.py
holds both paths to that over every real document and damaged copies of them).
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass
from typing import Any, Callable

from shardscope.results.fastcheck import _passed, table_rule
from shardscope.results.schemas import TABLES
from shardscope.results.tablebase import _Table, finite_number, iso_time_text

_INT64 = (-(2**63), 2**63)
#: Above this, an integer stored in a float64 column (what pandas makes of ints beside a null) is rounded.
_EXACT_FLOAT_INT = 2**53
#: The pandas dtype (as pandera's dtype prints it) -> the kind of value a column holds; others are not mirrored.
_KINDS = {"string[pyarrow]": "string", "int64": "int", "Int64": "nullable_int",
          "float64": "float", "bool": "bool", "boolean": "nullable_bool"}
_ARROW = {"string": "string", "int": "int64", "nullable_int": "int64", "float": "float64", "bool": "bool_",
          "nullable_bool": "bool_"}


def _str_length(value: str, min_value: int | None = None, max_value: int | None = None,
                exact_value: int | None = None) -> bool:
    """pandera's ``str_length`` on one string."""
    n = len(value)
    if exact_value is not None:
        return n == exact_value
    if min_value is None and max_value is None:
        raise ValueError("str_length needs a bound")
    return (min_value is None or n >= min_value) and (max_value is None or n <= max_value)


def _in_range(value: Any, min_value: Any, max_value: Any, include_min: bool = True, include_max: bool = True) -> bool:
    """pandera's ``in_range`` on one value."""
    low = operator.ge if include_min else operator.gt
    high = operator.le if include_max else operator.lt
    return bool(low(value, min_value) and high(value, max_value))


def _isin(value: Any, allowed_values: Any) -> bool:
    return value in allowed_values


def _notin(value: Any, forbidden_values: Any) -> bool:
    return value not in forbidden_values


#: pandera's builtin checks that compare each value on its own, as predicates on one Python value.
_SCALAR: dict[str, Callable[..., bool]] = {
    "greater_than": lambda v, min_value: v > min_value,
    "greater_than_or_equal_to": lambda v, min_value: v >= min_value,
    "less_than": lambda v, max_value: v < max_value,
    "less_than_or_equal_to": lambda v, max_value: v <= max_value,
    "equal_to": lambda v, value: v == value,
    "not_equal_to": lambda v, value: v != value,
    "in_range": _in_range,
    "isin": _isin,
    "notin": _notin,
    "str_length": _str_length,
}
_NUMERIC_CHECKS = {"greater_than", "greater_than_or_equal_to", "less_than", "less_than_or_equal_to", "equal_to",
                   "not_equal_to", "in_range"}


@dataclass(frozen=True)
class ScalarColumn:
    """One column: its kind (string, int, ...), nullability, uniqueness, scalar checks and pandas checks."""

    name: str
    kind: str
    pandas_dtype: Any
    nullable: bool
    unique: bool
    scalar: tuple[Callable[[Any], bool], ...]
    series_checks: tuple[Callable[[Any], Any], ...]  # run on the non-null values as a pandas Series (ignore_na)


@dataclass(frozen=True)
class ScalarTable:
    """A table's schema as scalar rules, its unique keys, its dataframe checks and its Arrow schema."""

    columns: tuple[ScalarColumn, ...]
    unique: tuple[tuple[int, ...], ...]
    frame_checks: tuple[tuple[Callable[[Any], Any], bool], ...]
    arrow_schema: Any


def _declared_function(check: Any) -> Any:
    """The function a schema's ``@pa.check`` method declared (pandera calls it through an adapter); None if not found."""
    for cell in getattr(check._check_fn, "__closure__", None) or ():
        function = getattr(cell.cell_contents, "check_fn", None)
        if function is not None:
            return function
    return None


@functools.cache
def _twins() -> dict[Any, tuple[tuple[str, ...], Callable[[Any], bool]]]:
    """Checks declared in the schemas that have a version on one plain value: function -> (column kinds, predicate)."""
    from shardscope.results.schemas import RunsSchema
    from shardscope.results.schemas_diagnosis import DoctorFindingsSchema

    return {_Table.finite.__func__: (("int", "nullable_int", "float"), finite_number),
            RunsSchema.measured_at_is_a_time.__func__: (("string",), iso_time_text),
            DoctorFindingsSchema.checked_at_is_a_time.__func__: (("string",), iso_time_text)}


def _scalar_check(check: Any, kind: str) -> Callable[[Any], bool] | None:
    """``check`` as a predicate on one non-null value, if it is a builtin comparing values one by one or has a twin (:func:`_twins`)."""
    twin = _twins().get(_declared_function(check))
    if twin is not None and kind in twin[0] and not check._check_kwargs:
        return functools.partial(twin[1])
    name = getattr(check, "name", None)
    if name not in _SCALAR or not check.is_builtin_check(name):
        return None
    if name in _NUMERIC_CHECKS and kind not in ("int", "nullable_int", "float"):
        return None
    if name == "str_length" and kind != "string":
        return None
    if name in ("isin", "notin"):
        values = next(iter(check._check_kwargs.values()))
        if isinstance(values, str) or not isinstance(values, (list, tuple, set, frozenset)):
            return None
    return functools.partial(_SCALAR[name], **check._check_kwargs)


@functools.cache
def scalar_table(table: str) -> ScalarTable | None:
    """``table``'s pandera schema as scalar rules, once per process; None where a feature is not mirrored."""
    import pyarrow

    rule = table_rule(table)
    if rule is None or not rule.strict:
        return None
    schema = TABLES[table].to_schema()
    columns = []
    for col_rule in rule.columns:
        kind = _KINDS.get(str(col_rule.dtype))
        if kind is None or not col_rule.coerce:
            return None
        scalar, series = [], []
        for check, (function, ignore_na) in zip(schema.columns[col_rule.name].checks, col_rule.checks):
            if not ignore_na:
                return None
            predicate = _scalar_check(check, kind)
            if predicate is not None:
                scalar.append(predicate)
            else:
                series.append(function)
        columns.append(ScalarColumn(col_rule.name, kind, col_rule.dtype.type, col_rule.nullable, col_rule.unique,
                                    tuple(scalar), tuple(series)))
    position = {col.name: i for i, col in enumerate(columns)}
    arrow = pyarrow.schema([(col.name, getattr(pyarrow, _ARROW[col.kind])()) for col in columns])
    return ScalarTable(tuple(columns), tuple(tuple(position[k] for k in key) for key in rule.unique),
                       rule.frame_checks, arrow)


def _value(col: ScalarColumn, value: Any) -> tuple[bool, Any]:
    """(accepted, the value as the coerced column holds it); not accepted when pandas would convert it first."""
    if value is None:  # a numpy int64 or bool column cannot hold a null: pandas would convert the column first
        return col.nullable and col.kind not in ("int", "bool"), None
    kind, cls = col.kind, type(value)
    if kind == "string":
        return cls is str, value
    if kind in ("int", "nullable_int"):
        return cls is int and _INT64[0] <= value < _INT64[1], value
    if kind == "float":
        if cls is int:
            return True, float(value)
        if cls is float:
            return (col.nullable, None) if math.isnan(value) else (True, value)  # NaN: pandas' null of a float column
        return False, None
    return cls is bool, value  # bool, nullable_bool


def _coerced_columns(spec: ScalarTable, rows: list[dict[str, Any]]) -> list[list[Any]] | None:
    """Every column's values (None for null) if each passes its type, nullability, uniqueness and scalar checks."""
    out = []
    for col in spec.columns:
        values = []
        for row in rows:
            ok, value = _value(col, row.get(col.name))
            if not ok:
                return None
            values.append(value)
        present = [v for v in values if v is not None]
        if col.kind == "nullable_int" and len(present) < len(values) and any(abs(v) > _EXACT_FLOAT_INT for v in present):
            return None  # pandas holds these ints as float64 beside a null before coercing: rounded; let pandera do it
        if col.unique and len(set(values)) < len(values):
            return None
        for predicate in col.scalar:
            if not all(predicate(v) for v in present):
                return None
        out.append(values)
    return out


def _pandas_array(col: ScalarColumn, values: list[Any], arrow: Any) -> Any:
    """The values as the pandas array of the column's coerced dtype (what pandera's coerced frame holds)."""
    import numpy as np
    import pandas as pd

    if col.kind == "string":
        return pd.arrays.ArrowStringArray(arrow)
    if col.kind == "int":
        return np.array(values, dtype="int64")
    if col.kind == "float":
        return np.array([math.nan if v is None else v for v in values], dtype="float64")
    if col.kind == "bool":
        return np.array(values, dtype="bool")
    mask = np.array([v is None for v in values], dtype="bool")
    if col.kind == "nullable_int":
        return pd.arrays.IntegerArray(np.array([0 if v is None else v for v in values], dtype="int64"), mask)
    return pd.arrays.BooleanArray(np.array([bool(v) for v in values], dtype="bool"), mask)


def _pandas_checks_pass(spec: ScalarTable, values: list[list[Any]], arrows: list[Any]) -> bool:
    """The checks not evaluated on scalars, each run as pandera's backend runs it, on the same pandas objects.

    A column check gets the column's non-null values (its checks ignore nulls) under their
    row positions; a dataframe check gets the whole coerced frame.
    """
    import pandas as pd

    arrays: dict[str, Any] = {}
    for col, column, arrow in zip(spec.columns, values, arrows):
        if col.series_checks or spec.frame_checks:
            arrays[col.name] = _pandas_array(col, column, arrow)
        if col.series_checks:
            at = [i for i, v in enumerate(column) if v is not None]
            series = pd.Series(arrays[col.name], name=col.name, copy=False)
            if len(at) < len(column):
                series = series.iloc[at]
            for check in col.series_checks:
                if not _passed(check(series), series, True, table_level=False):
                    return False
    if spec.frame_checks:
        count = len(values[0]) if values else 0
        frame = pd.DataFrame(arrays, index=pd.RangeIndex(count), copy=False)
        nulls = [any(column[i] is None for column in values) for i in range(count)]
        empty_rows = any(all(column[i] is None for column in values) for i in range(count))
        for check, ignore_na in spec.frame_checks:
            output = check(frame)
            # With no row entirely null (no null at all, for a frame output), pandera's "or the row is
            # null" adds nothing to a numpy bool output, nor to a pandas "boolean" one without NA (what a
            # comparison of a string column gives): read it directly, without building isna() frames.
            plain = isinstance(output, pd.Series) and not empty_rows and (output.dtype == bool or (
                isinstance(output.dtype, pd.BooleanDtype) and not output.hasnans)) or (
                isinstance(output, pd.DataFrame) and not any(nulls) and all(t == bool for t in output.dtypes))
            if not (bool(output.to_numpy(dtype=bool).all()) if plain else _passed(output, frame, ignore_na, table_level=True)):
                return False
    return True


def arrow_rows(table: str, rows: list[dict[str, Any]]) -> Any:
    """``rows`` of ``table`` as an Arrow table typed from its schema, if every row passes every check; else None.

    None also when a value would need pandas' conversion, a check raises, or the schema uses
    a feature not mirrored here: the caller then validates with pandas and pandera.
    """
    import pyarrow

    spec = scalar_table(table)
    if spec is None or not rows:
        return None
    try:
        values = _coerced_columns(spec, rows)
        if values is None:
            return None
        for key in spec.unique:
            keys = list(zip(*(values[i] for i in key)))
            if len(set(keys)) < len(keys):
                return None
        arrows = [pyarrow.array(column, type=field.type) for column, field in zip(values, spec.arrow_schema)]
        if not _pandas_checks_pass(spec, values, arrows):
            return None
        return pyarrow.Table.from_arrays(arrows, schema=spec.arrow_schema)
    except Exception:  # noqa: BLE001  (pandera words whatever made a check raise)
        return None

