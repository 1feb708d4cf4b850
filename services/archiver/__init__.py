"""The archiver: the history topic written to Parquet files for the Spark replay (`lagwatch run archiver`)."""
