"""Writing history records to Parquet files, partitioned by cluster and date (the layout of
`shared/records/history.py`).

Records are buffered up to `flush_rows` (bounded memory) and written as one file per (cluster, date) at each
flush. A file is written under a temporary name and renamed when complete, so a reader (or a crash) never sees
half a file on a local or HDFS filesystem; object stores (S3) write whole objects anyway. The root may be a local
path or any URI pyarrow's filesystems understand (`s3://bucket/history`, `hdfs://...`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs

from lagwatch.shared.records.history import HISTORY_COLUMNS, HistoryRecord, as_columns, utc_date

# Readers of the data (Spark, pyarrow datasets) skip names starting with "_", so a probe left by a crash is never read
PROBE_DIRECTORY = "_lagwatch_probe"
_ARROW_TYPES = {"string": pa.string(), "int": pa.int32(), "long": pa.int64()}
ARROW_SCHEMA = pa.schema([pa.field(name, _ARROW_TYPES[kind]) for name, kind in HISTORY_COLUMNS])


class HistoryRootUnavailable(Exception):
    """The root's filesystem cannot be opened (an object store out of reach, a filesystem pyarrow lacks): the
    archiver cannot start. The message is pyarrow's, on one line."""


def _filesystem(root: str) -> tuple[fs.FileSystem, str]:
    if "://" not in root:
        return fs.LocalFileSystem(), str(root)
    try:  # an object store resolves its bucket's region here
        filesystem, path = fs.FileSystem.from_uri(root)
    except (OSError, pa.ArrowException) as exc:
        reason = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())  # pyarrow's span lines
        raise HistoryRootUnavailable(reason) from exc
    return filesystem, path


@dataclass
class HistoryFileWriter:
    root: str
    flush_rows: int = 100_000
    compression: str = "zstd"
    _buffer: dict[tuple[str, str], list[HistoryRecord]] = field(default_factory=dict)
    buffered: int = 0  # records in `_buffer`
    rows_written: int = 0

    def __post_init__(self) -> None:
        self._fs, self._base = _filesystem(self.root)

    def add(self, records: Iterable[HistoryRecord]) -> bool:
        """Buffer records; True when the buffer is full and the caller should `flush`."""
        for record in records:
            self._buffer.setdefault((record.cluster, utc_date(record.observed_at)), []).append(record)
            self.buffered += 1
        return self.buffered >= self.flush_rows

    def flush(self) -> list[str]:
        """Write everything buffered; the paths written. On an error the buffer is kept (retry the flush)."""
        written = []
        for (cluster, date), records in sorted(self._buffer.items()):
            written.append(self._write(cluster, date, records))
            self.rows_written += len(records)
            del self._buffer[(cluster, date)]
            self.buffered -= len(records)
        return written

    def probe(self) -> None:
        """Write and delete a small file under the root as `flush` writes (a directory made, a file written), through
        the same filesystem and credentials: OSError or pyarrow's error when that fails. The directory stays (another
        archiver on the same root may be probing in it)."""
        directory = f"{self._base}/{PROBE_DIRECTORY}"
        self._fs.create_dir(directory, recursive=True)
        probe = f"{directory}/{uuid.uuid4().hex}"
        with self._fs.open_output_stream(probe) as out:
            out.write(b"lagwatch archiver start-up probe; safe to delete\n")
        self._fs.delete_file(probe)

    def _write(self, cluster: str, date: str, records: list[HistoryRecord]) -> str:
        directory = f"{self._base}/cluster={cluster}/date={date}"
        self._fs.create_dir(directory, recursive=True)
        name = f"part-{min(r.observed_at for r in records)}-{uuid.uuid4().hex[:12]}.parquet"
        table = pa.Table.from_pydict(as_columns(records), schema=ARROW_SCHEMA).drop_columns(["cluster"])
        temporary, final = f"{directory}/.{name}.tmp", f"{directory}/{name}"
        with self._fs.open_output_stream(temporary) as out:
            pq.write_table(table, out, compression=self.compression)
        self._fs.move(temporary, final)
        return final
