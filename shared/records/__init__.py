"""Records in, records out: the `__consumer_offsets` records' layouts and their decoder (offsets_layouts.py,
offsets_codec.py), and the history records the ingest publishes, the archiver writes to Parquet and the Spark replay
reads (history.py, history_files.py)."""
