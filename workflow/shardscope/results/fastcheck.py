"""Every pandera check of a table run directly on a frame, without pandera's per-column machinery.

pandera's ``validate`` costs about 2 ms per column however few rows a frame has (its
backends build failure-case frames, copy schema components and reshape outputs even when
every check passes). A training document fills about 110 columns, so a ``collect`` of one
file spent 250 ms in pandera and loading files one call at a time was 13 times slower than
loading them in one call. This module reads the checks off the pandera schema once per
process and applies the same ones to a frame in one pass: dtype coercion by pandera's own
dtype objects, strictness, nullability, uniqueness, every column check and every dataframe
check, each through the check function pandera would call, on the rows pandera would pass
it. pandera stays the one declaration of every column.

It answers only "every row passes": :func:`passing` returns the coerced frame, or None
when anything fails, raises or is a schema feature it does not mirror. Then the caller
runs pandera's own ``validate``, which finds and words the problems (and is the judge: a
frame pandera accepts is accepted). So a problem is never reported by this module, and a
frame it accepts is one that pandera's checks accept too.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import pandas as pd
from pandera.api.checks import Check
from pandera.backends.pandas.checks import PandasCheckBackend
from pandera.config import CONFIG
from pandera.engines.pandas_engine import Engine

from shardscope.results.schemas import TABLES


@dataclass(frozen=True)
class ColumnRule:
    """One column's checks as pandera runs them: dtype (coerced or not), nulls, uniqueness, checks."""

    name: str
    dtype: Any
    coerce: bool
    nullable: bool
    unique: bool
    checks: tuple[tuple[Callable[[pd.Series], Any], bool], ...]  # (check function with its arguments, ignore_na)


@dataclass(frozen=True)
class TableRule:
    """A table's schema as plain rules: its columns, its multi-column unique keys and its dataframe checks."""

    columns: tuple[ColumnRule, ...]
    strict: bool
    unique: tuple[tuple[str, ...], ...]
    frame_checks: tuple[tuple[Callable[[pd.DataFrame], Any], bool], ...]


def _check_function(check: Check) -> tuple[Callable[[Any], Any], bool] | None:
    """The function pandera's pandas backend calls for ``check``, and its ignore_na; None for what is not mirrored."""
    if check.groupby is not None or check.element_wise or check.raise_warning or check._check_fn is None:
        return None
    function, name = check._check_fn, getattr(check._check_fn, "__name__", None)
    if name is not None and check.is_builtin_check(name):  # as Check.__call__ does: the implementation for pandas
        function = check.get_builtin_check_fn(name)
    return partial(function, **check._check_kwargs), bool(check.ignore_na)


def _mirrorable(schema: Any) -> bool:
    """Whether the schema uses only features :func:`passing` applies exactly as pandera does."""
    return (schema.index is None and schema.dtype is None and not schema.parsers and not schema.ordered
            and not schema.add_missing_columns and not schema.drop_invalid_rows and not schema.unique_column_names
            and getattr(schema, "on_missing_columns", None) is None and schema.strict in (True, False)
            and all(not col.regex and not col.parsers and col.default is None and col.required and not col.drop_invalid_rows
                    and getattr(col, "on_missing", None) is None and getattr(col, "selector", name) == name and col.dtype is not None
                    for name, col in schema.columns.items()))


@functools.cache
def table_rule(table: str) -> TableRule | None:
    """``table``'s pandera schema read into rules, once per process; None if it uses a feature not mirrored here."""
    schema = TABLES[table].to_schema()
    if getattr(CONFIG, "use_narwhals_backend", False) or not _mirrorable(schema):
        return None
    schema.register_default_backends(pd.DataFrame)  # pandera's pandas backends and check functions, as validate registers them
    if Check.get_backend(pd.Series(dtype="float64")) is not PandasCheckBackend:
        return None
    columns = []
    for name, col in schema.columns.items():
        checks = [_check_function(check) for check in col.checks]
        if any(check is None for check in checks):
            return None
        columns.append(ColumnRule(name, col.dtype, bool(col.coerce or schema.coerce), bool(col.nullable), bool(col.unique),
                                  tuple(checks)))  # type: ignore[arg-type]
    frame_checks = [_check_function(check) for check in schema.checks]
    if any(check is None for check in frame_checks):
        return None
    unique = schema.unique or []
    keys = [list(unique)] if all(isinstance(x, str) for x in unique) else [list(k) for k in unique]
    return TableRule(tuple(columns), bool(schema.strict), tuple(tuple(k) for k in keys if k),
                     tuple(frame_checks))  # type: ignore[arg-type]


def _passed(output: Any, checked: pd.Series | pd.DataFrame, ignore_na: bool, table_level: bool) -> bool:
    """Whether a check function's output means "passed", read as pandera's pandas check backend reads it."""
    if isinstance(output, pd.Series):
        if output.empty and output.dtype != bool:
            output = output.astype(bool)
        if table_level and ignore_na and checked.index.equals(output.index):
            output = output | checked.isna().all(axis="columns")
        return bool(output.all())
    if isinstance(output, pd.DataFrame):
        if table_level and ignore_na and checked.index.equals(output.index):
            output = output | checked.isna()
        return bool(output.all(axis=None))
    if isinstance(output, bool) or type(output).__name__ == "bool_":
        return bool(output)
    raise TypeError(f"a check returned {type(output).__name__}")


def _column(rule: ColumnRule, series: pd.Series) -> pd.Series | None:
    """The column coerced to its dtype if it passes every check of ``rule``, else None."""
    if rule.coerce:
        series = rule.dtype.try_coerce(series)
    found = rule.dtype.check(Engine.dtype(series.dtype), series)
    if not (found if isinstance(found, bool) else bool(found.all())):
        return None
    nulls = series.hasnans
    if nulls and not rule.nullable:
        return None
    if rule.unique and not series.is_unique:
        return None
    present = series.dropna() if nulls and any(ignore_na for _, ignore_na in rule.checks) else series
    for check, ignore_na in rule.checks:
        checked = present if ignore_na else series
        if not _passed(check(checked), checked, ignore_na, table_level=False):
            return None
    return series


def passing(table: str, frame: pd.DataFrame) -> pd.DataFrame | None:
    """``frame`` coerced as pandera's ``validate`` returns it, if every row passes every check of ``table``; else None.

    None also when a check raises or the schema uses a feature not mirrored here: the caller
    then validates with pandera itself, which reports (or, being the judge, accepts) the rows.
    """
    rule = table_rule(table)
    if rule is None or not frame.columns.is_unique:
        return None
    names = [col.name for col in rule.columns]
    if (set(frame.columns) != set(names)) if rule.strict else not set(names) <= set(frame.columns):
        return None
    try:
        coerced = {}
        for col in rule.columns:
            series = _column(col, frame[col.name])
            if series is None:
                return None
            coerced[col.name] = series
        out = pd.DataFrame({name: coerced.get(name, frame[name]) for name in frame.columns}, index=frame.index)
        if any(out.duplicated(subset=list(key), keep=False).any() for key in rule.unique):
            return None
        for check, ignore_na in rule.frame_checks:
            if not _passed(check(out), out, ignore_na, table_level=True):
                return None
    except Exception:  # noqa: BLE001  (pandera reports whatever made a check raise, or a failed coercion)
        return None
    return out


def validate(table: str, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` validated against ``table``'s schema: :func:`passing`, else pandera's ``validate(lazy=True)``.

    Returns the coerced frame; raises pandera's ``SchemaErrors`` (naming every failed row,
    column and check) exactly when pandera itself rejects the frame.
    """
    found = passing(table, frame)
    return found if found is not None else TABLES[table].validate(frame, lazy=True)
