# One image for every lagwatch service: `lagwatch run <service>` picks which.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY lagwatch ./lagwatch
COPY shared ./shared
COPY services ./services
COPY spark ./spark
RUN pip install --no-cache-dir .
USER nobody
ENTRYPOINT ["lagwatch"]
