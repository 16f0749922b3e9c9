# Two commands do everything on a fresh Debian/Ubuntu machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DATA_DIR ?= .docjobs
# Debian packages in two sets: what the jobs run (`make demo`, `serve`, `secrets` and the tests' targets install it;
# the worker image, Dockerfile, installs exactly this: tests/test_compose.py), and what only the tests use (`make test`
# and `make check` add it).
# WeasyPrint (the generate stage) needs Pango (with its HarfBuzz) and fontconfig: libraries, no tool to look for.
# jbig2dec decodes JBIG2 images for qpdf's checks and redaction, inside the children (docjobs/pdf/jbig2.py).
# bubblewrap (bwrap) is the document children's sandbox: a worker without it refuses to start (docjobs/isolation/confine.py).
# LibreOffice without a GUI (the -nogui flavours) converts office input in the render stage (docs/office.md), with
# Carlito and Caladea, metric-compatible with Calibri and Cambria, and Liberation, with Arial and Times New Roman,
# for documents that name them.
RUNTIME_PACKAGES := tesseract-ocr ghostscript qpdf poppler-utils jbig2dec libpango-1.0-0 libpangoft2-1.0-0 \
	libharfbuzz-subset0 fontconfig fonts-dejavu-core bubblewrap \
	libreoffice-writer-nogui libreoffice-calc-nogui libreoffice-impress-nogui \
	fonts-crosextra-carlito fonts-crosextra-caladea fonts-liberation2
RUNTIME_FONTS := Carlito Caladea "Liberation Sans"
RUNTIME_TOOLS := tesseract gs qpdf pdftotext pdftoppm pdfinfo pdffonts jbig2dec fc-list bwrap soffice
RUNTIME_LIBRARIES := libpango-1.0.so.0 libpangoft2-1.0.so.0 libharfbuzz-subset.so.0
# LibreOffice's modules are no commands: Writer, Calc and Impress, by a library each package installs.
RUNTIME_FILES := /usr/lib/libreoffice/program/libswlo.so /usr/lib/libreoffice/program/libsclo.so \
	/usr/lib/libreoffice/program/libslideshowlo.so
# The venv's own (the image's Python has venv and pip already).
VENV_PACKAGES := python3-venv
# Only the tests: headless Chromium drives the API's docs page (tests/test_api.py), OpenSSL checks signed evidence
# with no docjobs code (tests/test_signing.py).
TEST_PACKAGES := chromium openssl
TEST_TOOLS := chromium openssl
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# `$(call apt_install,PACKAGES)` ends a recipe line that has collected what is missing in $$missing.
apt_install = if [ -n "$$missing" ]; then \
	echo "installing system packages (missing:$$missing)"; \
	$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(1) >/dev/null; \
	fi

.PHONY: demo test check deps system-deps test-deps test-system-deps dev-deps lint stop clean serve secrets

# What the demo, `serve` and `secrets` need: the runtime packages and the venv with the runtime requirements.
deps: system-deps $(VENV)/.installed

# The tests', linters' and docs' Python packages on top (requirements-dev.txt): what `make lint` needs.
dev-deps: deps $(VENV)/.installed-dev

# Everything the test suite needs: the dev requirements and the test-only Debian packages.
test-deps: dev-deps test-system-deps

# Debian packages, installed only when a tool, library, file or font of theirs is missing.
system-deps:
	@missing=""; for tool in $(RUNTIME_TOOLS); do command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	for lib in $(RUNTIME_LIBRARIES); do ldconfig -p | grep -q "$$lib" || missing="$$missing $$lib"; done; \
	for file in $(RUNTIME_FILES); do [ -e "$$file" ] || missing="$$missing $$file"; done; \
	for font in $(RUNTIME_FONTS); do fc-list -q "$$font" 2>/dev/null || missing="$$missing $$font"; done; \
	$(PYTHON) -c "import ensurepip, venv" 2>/dev/null || missing="$$missing python3-venv"; \
	$(call apt_install,$(RUNTIME_PACKAGES) $(VENV_PACKAGES))

test-system-deps: system-deps
	@missing=""; for tool in $(TEST_TOOLS); do command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	$(call apt_install,$(TEST_PACKAGES))

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements.txt
	touch $@

$(VENV)/.installed-dev: requirements-dev.txt $(VENV)/.installed
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $@

SAMPLES := $(DATA_DIR)/samples

# Generated once (demo/make_samples.py): the same bytes again make the same jobs, so a second `make demo` reuses them.
$(SAMPLES)/sample.pdf: demo/make_samples.py $(wildcard demo/templates/invoice/*) | deps
	$(PY) demo/make_samples.py $(SAMPLES)

# The main job on the embedded defaults: a generated sample through both watermark modes, a scan via OCR,
# a letter with (fake) personal data in a CID font, as Word writes it, redacted for real, a Word memo converted by
# LibreOffice in the sandbox (office input: the default policy takes it), and an invoice generated from the shipped
# template (demo/templates/invoice) and data (demo/invoice.json).
demo: deps $(SAMPLES)/sample.pdf
	$(PY) starter.py run $(SAMPLES)/sample.pdf --out out/sample.watermarked.pdf
	$(PY) starter.py run $(SAMPLES)/sample.pdf --policy preview --out out/sample.preview.pdf
	$(PY) starter.py run $(SAMPLES)/scan.pdf --policy scan --out out/scan.searchable.pdf
	$(PY) starter.py run $(SAMPLES)/letter.pdf --policy external --out out/letter.redacted.pdf
	$(PY) starter.py run $(SAMPLES)/memo.docx --out out/memo.pdf
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

lint: dev-deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mkdocs build --strict

# The whole suite (what CI runs): unit, workflow (dev server, activity doubles) and e2e (real workers, children), on
# pytest-xdist's workers, two a core (the suite waits on servers, leases and children about half its time), a module
# at a time, the longest first (tests/conftest.py; docs/tests.md). Each marker's time budget is checked at the end.
TEST_WORKERS ?= $(shell echo $$((2 * $$(nproc))))
test: test-deps lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# The fast loop: the linters and the tests that start no Temporal server, worker, child or OCR tool, on every core.
check: test-deps lint
	$(PY) -m pytest -q -m unit -n auto

stop:
	@[ -x $(PY) ] && $(PY) starter.py server stop || true

clean: stop
	rm -rf $(DATA_DIR) out
