"""The generate stage's document work, in this process: bundles unpacked with limits, templates in Jinja's
sandbox, WeasyPrint fetching nothing outside the job, fonts checked with poppler."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pikepdf
import pytest
from reportlab.pdfgen.canvas import Canvas

from docjobs.domain.errors import DocJobError
from docjobs.domain.policy import GeneratePolicy, MissingResource
from docjobs.generate.bundle import unpack_bundle
from docjobs.generate.templating import render_template
from docjobs.generate.weasy import html_to_pdf
from docjobs.pdf.fidelity import check_fonts_embedded, fonts_not_embedded
from docjobs.store.templates import zip_folder
from tests.ci_skips import needs_tools
from tests.fixtures.generate_samples import (
    HOSTILE_BUNDLES,
    PASSWD_MARKER,
    bundle_folder,
    loopback_server,
    reaching_page,
    zip_bomb,
    zip_entries,
)


def text_of(pdf: Path) -> str:
    return subprocess.run(["pdftotext", "-q", str(pdf), "-"], capture_output=True, text=True, check=True).stdout


def unpack(archive: Path, dest: Path, *, max_bytes: int = 1 << 20, max_files: int = 10) -> Path:
    return unpack_bundle(archive, dest, max_bytes=max_bytes, max_files=max_files)


@pytest.mark.parametrize("kind", sorted(HOSTILE_BUNDLES))
def test_a_hostile_bundle_is_refused_and_writes_nothing_outside(kind: str, tmp_path: Path) -> None:
    archive = zip_entries(tmp_path / "bundle.zip", HOSTILE_BUNDLES[kind])
    site = tmp_path / "jail" / "site"
    with pytest.raises(DocJobError) as refused:
        unpack(archive, site)
    assert refused.value.code == "input.malformed"
    outside = [path for path in tmp_path.rglob("*") if not path.is_relative_to(site) and path.is_file()]
    assert sorted(path.name for path in outside) == ["bundle.zip"]
    assert not Path("/tmp/escaped.txt").exists()
    assert not any(path.is_symlink() for path in site.rglob("*"))


def test_a_bundle_past_its_limits_is_too_large(tmp_path: Path) -> None:
    bomb = zip_bomb(tmp_path / "bomb.zip", 8 << 20)
    assert bomb.stat().st_size < 64 * 1024
    with pytest.raises(DocJobError) as too_big:
        unpack(bomb, tmp_path / "a", max_bytes=1 << 20)
    assert too_big.value.code == "input.too_large"
    assert sum(path.stat().st_size for path in (tmp_path / "a").rglob("*") if path.is_file()) <= 1 << 20
    many = zip_entries(tmp_path / "many.zip", [(f"f{index}.txt", b"x", 0o100644) for index in range(11)])
    with pytest.raises(DocJobError) as too_many:
        unpack(many, tmp_path / "b", max_files=10)
    assert too_many.value.code == "input.too_large"
    (tmp_path / "junk.zip").write_bytes(b"PK\x03\x04 not a zip at all")
    with pytest.raises(DocJobError) as broken:
        unpack(tmp_path / "junk.zip", tmp_path / "c")
    assert broken.value.code == "input.malformed"


def test_a_bundle_unpacks_to_its_files(tmp_path: Path) -> None:
    zip_folder(bundle_folder(tmp_path / "src", "hello"), tmp_path / "bundle.zip")
    index = unpack(tmp_path / "bundle.zip", tmp_path / "site")
    assert index == tmp_path / "site" / "index.html"
    assert sorted(p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("*.*")) == [
        "fonts/bundle.ttf",
        "index.html",
        "logo.png",
        "style.css",
    ]


def template_error(tmp_path: Path, source: str, data: dict[str, object], seconds: float = 5) -> DocJobError:
    (tmp_path / "index.html").write_text(source)
    with pytest.raises(DocJobError) as failed:
        render_template(tmp_path, "index.html", data, seconds=seconds)
    assert failed.value.code == "template.invalid"
    return failed.value


SECRET = "S3CRET-VALUE-4242"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("<p>{{ name }}</p>\n<p>{{ missing }}</p>", "an undefined value at line 2"),
        ("<p>\n\n{% for x in items %}{{ x }}", "a syntax error at line 3"),
        ("<p>{{ name }}</p>\n\n\n<p>{{ name + 1 }}</p>", "an error (TypeError) at line 4"),
        ("{{ ''.__class__.__mro__ }}", "an operation the sandbox refuses at line 1"),
        ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "an operation the sandbox refuses at line 1"),
        ("{{ name.__class__ }}", "an operation the sandbox refuses at line 1"),
        ("{{ cycler.__init__.__globals__ }}", "an operation the sandbox refuses at line 1"),
        ("{{ items.append(1) }}", "an operation the sandbox refuses at line 1"),
        ("{% include '../../../../etc/passwd' %}", "an error (TemplateNotFound) at line 1"),
        ("{% include '/etc/passwd' %}", "an error (TemplateNotFound) at line 1"),
    ],
)
def test_a_template_error_names_its_line_never_the_data(tmp_path: Path, source: str, message: str) -> None:
    error = template_error(tmp_path, source, {"name": SECRET, "items": [SECRET]})
    assert error.message == f"the template has {message}"
    assert SECRET not in error.message and PASSWD_MARKER not in error.message


def test_the_line_is_named_for_a_folder_given_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "index.html").write_text("\n\n{{ lipsum.__globals__ }}")
    with pytest.raises(DocJobError) as failed:
        render_template(Path("."), "index.html", {}, seconds=5)
    assert failed.value.message == "the template has an operation the sandbox refuses at line 3"


def test_a_template_that_loops_without_bound_is_stopped(tmp_path: Path) -> None:
    source = "{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}"
    error = template_error(tmp_path, source, {}, seconds=0.5)
    assert error.message == "the template has no end within its 0.5-second limit at line 1"


def test_a_template_renders_escaped_data(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("{% include 'part.html' %}")
    (tmp_path / "part.html").write_text("<p>{{ name }}</p>")
    html = render_template(tmp_path, "index.html", {"name": "<script>x</script>"}, seconds=5)
    assert html == "<p>&lt;script&gt;x&lt;/script&gt;</p>"


@needs_tools("pdffonts")
def test_a_font_that_is_not_embedded_is_found(tmp_path: Path) -> None:
    canvas = Canvas(str(tmp_path / "helvetica.pdf"))
    canvas.setFont("Helvetica", 12)  # one of the standard 14: referenced by name, never embedded
    canvas.drawString(72, 720, "not embedded")
    canvas.save()
    assert fonts_not_embedded(tmp_path / "helvetica.pdf") == 1
    with pytest.raises(DocJobError) as failed:
        check_fonts_embedded(tmp_path / "helvetica.pdf")
    assert failed.value.code == "fidelity.fonts"


@needs_tools("pdffonts", "pdftotext")
def test_a_bundle_page_uses_its_own_font_and_images(tmp_path: Path) -> None:
    site = bundle_folder(tmp_path / "site", "bundled marker")
    summary = html_to_pdf(site, tmp_path / "out.pdf", GeneratePolicy(), max_pages=10, on_pages=lambda *_: None)
    assert (summary.page_count, summary.refused) == (1, {})
    fonts = subprocess.run(["pdffonts", str(tmp_path / "out.pdf")], capture_output=True, text=True).stdout
    assert "BundleSans" in fonts and fonts_not_embedded(tmp_path / "out.pdf") == 0
    assert "bundled marker" in text_of(tmp_path / "out.pdf")
    with pikepdf.open(tmp_path / "out.pdf") as pdf:
        assert pdf.pages[0].get_images()


@needs_tools("pdftotext", "qpdf")
@pytest.mark.parametrize("missing", list(MissingResource))
def test_nothing_outside_the_job_is_fetched(tmp_path: Path, missing: MissingResource) -> None:
    site = tmp_path / "site"
    site.mkdir()
    policy = GeneratePolicy(missing=missing)
    with loopback_server() as server:
        (site / "index.html").write_text(reaching_page(server.base, "reaching marker"))
        if missing is MissingResource.FAIL:
            with pytest.raises(DocJobError) as refused:
                html_to_pdf(site, tmp_path / "out.pdf", policy, max_pages=10, on_pages=lambda *_: None)
            assert refused.value.code == "generate.resource_refused"
            assert server.base not in refused.value.message and "passwd" not in refused.value.message
        else:
            summary = html_to_pdf(site, tmp_path / "out.pdf", policy, max_pages=10, on_pages=lambda *_: None)
            # Nine http(s) references (the iframe is not a resource WeasyPrint loads), /etc/passwd (one URL, however
            # it is written: fetched once), three attachments.
            assert summary.refused == {"http": 9, "file": 1, "attachment": 3}
            assert "reaching marker" in text_of(tmp_path / "out.pdf")
            expanded = tmp_path / "out.qdf"
            subprocess.run(["qpdf", "--qdf", "--object-streams=disable", str(tmp_path / "out.pdf"), str(expanded)])
            raw = expanded.read_bytes()
            assert PASSWD_MARKER.encode() not in raw and b"/EmbeddedFile" not in raw and b"/FileAttachment" not in raw
    assert server.requests == []
