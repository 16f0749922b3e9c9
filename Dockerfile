# The docjobs worker image used by docker-compose.temporal.yml. Its Debian packages are the Makefile's
# RUNTIME_PACKAGES (tests/test_compose.py), its Python packages requirements.txt: nothing only the tests use.
# It runs as the unprivileged user `docjobs`; the code and the Python packages are root's and read-only to it.
# Each tenant's document children run in a bubblewrap sandbox (docs/security.md), which needs user
# namespaces: the compose file gives the worker services the seccomp and AppArmor settings that allow them.
FROM python:3.11-slim-bookworm
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        tesseract-ocr ghostscript qpdf poppler-utils jbig2dec bubblewrap \
        libpango-1.0-0 libpangoft2-1.0-0 libharfbuzz-subset0 fontconfig fonts-dejavu-core \
        libreoffice-writer-nogui libreoffice-calc-nogui libreoffice-impress-nogui \
        fonts-crosextra-carlito fonts-crosextra-caladea fonts-liberation2 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --create-home --home-dir /var/lib/docjobs docjobs \
    && mkdir /data && chown docjobs:docjobs /data
WORKDIR /app
COPY requirements.txt pyproject.toml ./
RUN pip install --no-cache-dir -r requirements.txt
COPY docjobs ./docjobs
COPY workflows ./workflows
COPY activities ./activities
COPY worker.py starter.py ./
RUN chmod -R a-w /app
USER docjobs
ENV DOCJOBS_DATA_DIR=/var/lib/docjobs
CMD ["python", "worker.py"]
