# Two commands do everything on a fresh Debian/Ubuntu machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DATA_DIR ?= .docjobs
# WeasyPrint (the generate stage) needs Pango (with its HarfBuzz) and fontconfig: libraries, no tool to look for.
# jbig2dec decodes JBIG2 images for qpdf's checks and redaction, inside the children (docjobs/pdf/jbig2.py).
# bubblewrap (bwrap) is the document children's sandbox: a worker without it refuses to start (docjobs/isolation/confine.py).
# LibreOffice without a GUI (the -nogui flavours) converts office input in the render stage (docs/office.md), with
# Carlito and Caladea, metric-compatible with Calibri and Cambria, for documents that name them.
SYSTEM_PACKAGES := tesseract-ocr ghostscript qpdf poppler-utils jbig2dec chromium libpango-1.0-0 libpangoft2-1.0-0 \
	libharfbuzz-subset0 fontconfig fonts-dejavu-core bubblewrap \
	libreoffice-writer-nogui libreoffice-calc-nogui libreoffice-impress-nogui \
	fonts-crosextra-carlito fonts-crosextra-caladea
SYSTEM_FONTS := Carlito Caladea
SYSTEM_TOOLS := tesseract gs qpdf pdftotext pdftoppm pdfinfo pdffonts jbig2dec chromium fc-list bwrap soffice
SYSTEM_LIBRARIES := libpango-1.0.so.0 libpangoft2-1.0.so.0 libharfbuzz-subset.so.0
# LibreOffice's modules are no commands: Writer, Calc and Impress, by a library each package installs.
SYSTEM_FILES := /usr/lib/libreoffice/program/libswlo.so /usr/lib/libreoffice/program/libsclo.so \
	/usr/lib/libreoffice/program/libslideshowlo.so
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test check deps system-deps lint stop clean serve secrets

deps: system-deps $(VENV)/.installed

# Debian packages, installed only when a tool, library, file or font of theirs is missing.
system-deps:
	@missing=""; for tool in $(SYSTEM_TOOLS); do command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	for lib in $(SYSTEM_LIBRARIES); do ldconfig -p | grep -q "$$lib" || missing="$$missing $$lib"; done; \
	for file in $(SYSTEM_FILES); do [ -e "$$file" ] || missing="$$missing $$file"; done; \
	for font in $(SYSTEM_FONTS); do fc-list -q "$$font" 2>/dev/null || missing="$$missing $$font"; done; \
	$(PYTHON) -c "import ensurepip, venv" 2>/dev/null || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
		echo "installing system packages (missing:$$missing)"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(SYSTEM_PACKAGES) python3-venv >/dev/null; \
	fi

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements.txt
	touch $@

SAMPLES := $(DATA_DIR)/samples

# Generated once (demo/make_samples.py): the same bytes again make the same jobs, so a second `make demo` reuses them.
$(SAMPLES)/sample.pdf: demo/make_samples.py $(wildcard demo/templates/invoice/*) | deps
	$(PY) demo/make_samples.py $(SAMPLES)

# The main job on the embedded defaults: a generated sample through both watermark modes, a scan via OCR,
# a letter with (fake) personal data in a CID font, as Word writes it, redacted for real, and an invoice
# generated from the shipped template (demo/templates/invoice) and data (demo/invoice.json).
demo: deps $(SAMPLES)/sample.pdf
	$(PY) starter.py run $(SAMPLES)/sample.pdf --out out/sample.watermarked.pdf
	$(PY) starter.py run $(SAMPLES)/sample.pdf --policy preview --out out/sample.preview.pdf
	$(PY) starter.py run $(SAMPLES)/scan.pdf --policy scan --out out/scan.searchable.pdf
	$(PY) starter.py run $(SAMPLES)/letter.pdf --policy external --out out/letter.redacted.pdf
	$(PY) starter.py template add invoice $(SAMPLES)/invoice
	$(PY) starter.py run --template invoice --data demo/invoice.json --out out/invoice.pdf
	@echo "outputs in out/; Temporal Web UI: http://127.0.0.1:8233 ; stop the dev server with 'make stop'"

# The HTTP API on the embedded defaults, with an in-process worker (create a tenant: starter.py tenant add NAME).
serve: deps
	$(PY) starter.py serve --with-worker

# The secrets of the compose `full` profile, in ops/secrets/ (gitignored): a payload codec key, the codec
# endpoint's bearer token and a DEVELOPMENT signer shared by every worker. Existing ones are kept.
secrets: deps
	@umask 077; [ -s ops/secrets/codec_keys ] || \
		$(PY) -c "import base64,os;print('k1:'+base64.b64encode(os.urandom(32)).decode())" > ops/secrets/codec_keys
	@umask 077; [ -s ops/secrets/codec_token ] || \
		$(PY) -c "import secrets;print(secrets.token_urlsafe(32))" > ops/secrets/codec_token
	@umask 077; [ -s ops/secrets/job_id_key ] || \
		$(PY) -c "import secrets;print(secrets.token_hex(32))" > ops/secrets/job_id_key
	@$(PY) -c "from pathlib import Path; from docjobs.signing.dev_ca import ensure_dev_signer; ensure_dev_signer(Path('ops/secrets/signing'))"
	@echo "ops/secrets/: codec_keys, codec_token, job_id_key, signing/ (DEVELOPMENT signer; its CA: ops/secrets/signing/ca.pem)"

lint: deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mkdocs build --strict

# The whole suite (what CI runs): unit, workflow (dev server, activity doubles) and e2e (real workers, children).
test: lint
	$(PY) -m pytest

# The fast loop: the linters and the tests that start no Temporal server, worker, child or OCR tool, on every core.
check: lint
	$(PY) -m pytest -q -m unit -n auto

stop:
	@[ -x $(PY) ] && $(PY) starter.py server stop || true

clean: stop
	rm -rf $(DATA_DIR) out
