"""Records in, records out: the Kafka coordinators' records and their decoders, for ``__consumer_offsets``
(offsets_layouts.py, offsets_codec.py; share- and streams-group records in group_layouts.py, group_records.py) and
``__share_group_state`` (share_state_layouts.py, share_state_codec.py), all read through coordinator_wire.py; and the
history records the ingest publishes, the archiver writes to Parquet and the Spark replay reads (history.py,
history_files.py)."""
