"""The one compiled module: the ingest's per-record loop (services/ingest/commit_pass.pyx; everything else is in
pyproject.toml). Optional: without a C compiler the install still succeeds, and the ingest runs the same loop in
Python, slower (it logs which one it runs)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("lagwatch.services.ingest.commit_pass", ["services/ingest/commit_pass.pyx"], optional=True),
    ]
)
