"""The compiled modules, both on the ingest's hot path: its per-record loop (services/ingest/commit_pass.pyx) and
its flush to Redis (services/ingest/flush_encoding.pyx); everything else is in pyproject.toml. Optional: without a
C compiler the install still succeeds, and the ingest runs the same steps in Python, slower (it logs so)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("lagwatch.services.ingest.commit_pass", ["services/ingest/commit_pass.pyx"], optional=True),
        Extension("lagwatch.services.ingest.flush_encoding", ["services/ingest/flush_encoding.pyx"], optional=True),
    ]
)
