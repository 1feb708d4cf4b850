# One image for every lagwatch service: `lagwatch run <service>` picks which. The `spark` target adds Java and
# PySpark for the history replay (`lagwatch spark reprocess`).
FROM python:3.11-slim AS services
WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY lagwatch ./lagwatch
COPY shared ./shared
COPY services ./services
COPY spark ./spark
# gcc only while installing: it compiles the ingest's hot path (services/ingest/*.pyx)
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev \
    && pip install --no-cache-dir . \
    && apt-get purge -y -qq gcc libc6-dev && apt-get autoremove -y -qq && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /history /replay && chown nobody /history /replay
USER nobody
ENTRYPOINT ["lagwatch"]

FROM services AS spark
USER root
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/* \
    && pip install --no-cache-dir ".[spark]"
ENV PYSPARK_PYTHON=/usr/local/bin/python
USER nobody
