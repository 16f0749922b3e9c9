# The docjobs worker image used by docker-compose.temporal.yml.
FROM python:3.11-slim-bookworm
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        tesseract-ocr ghostscript qpdf poppler-utils \
        libpango-1.0-0 libpangoft2-1.0-0 libharfbuzz-subset0 fontconfig fonts-dejavu-core \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.txt pyproject.toml ./
RUN pip install --no-cache-dir -r requirements.txt
COPY docjobs ./docjobs
COPY workflows ./workflows
COPY activities ./activities
COPY worker.py starter.py ./
CMD ["python", "worker.py"]
