"""Spark SQL types for the type names the history and output column tables use."""

from __future__ import annotations

from pyspark.sql.types import BooleanType, DataType, DoubleType, IntegerType, LongType, StringType

_TYPES: dict[str, DataType] = {
    "string": StringType(),
    "int": IntegerType(),
    "long": LongType(),
    "double": DoubleType(),
    "boolean": BooleanType(),
}


def spark_type(name: str) -> DataType:
    return _TYPES[name]
