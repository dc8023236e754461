"""Spark finds Python data sources in installed top-level modules named `pyspark_*` that expose a
`DefaultSource`: this one makes `format("velamq")` work without any registration (see velamq.spark)."""

from velamq.spark import VelamqDataSource as DefaultSource

__all__ = ["DefaultSource"]
