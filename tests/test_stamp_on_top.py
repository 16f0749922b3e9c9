"""Nothing covers the watermark: what `render` releases has no annotation above its stamp (docjobs/pdf/watermark.py,
`flatten_annotations`). Checked on pixels (poppler's `pdftoppm`, what a viewer shows) and on the annotation list."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pikepdf
from pikepdf import Array, Dictionary, Name, String
from PIL import Image

from docjobs.domain.models import RenderSettings
from docjobs.domain.policy import WatermarkMode, WatermarkPolicy
from docjobs.isolation.stage_work import RenderWork, render
from docjobs.pdf.watermark import GRAY, OPACITY, STAMP_BAND
from tests.fixtures import realworld
from tests.fixtures.samples import LINK_URL, make_sample_pdf

STAMP = "RELEASED COPY"
BLUE = (0, 0, 255)
_BLEND = round(OPACITY * GRAY * 255)
OVER_BLUE = (_BLEND, _BLEND, round((1 - OPACITY) * 255) + _BLEND)
DPI = 50


def add_cover(path: Path) -> None:
    """An opaque blue square annotation over the whole stamp band, a hidden one without an appearance, and an
    appearance on the page's link (a link with something to draw)."""
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        page = pdf.pages[0]
        x0, y0, x1, y1 = (float(v) for v in page.mediabox)
        height = y1 - y0
        band = [x0, y0 + (1 - STAMP_BAND[3]) * height - 20, x1, y0 + (1 - STAMP_BAND[1]) * height + 20]
        box = [0, 0, band[2] - band[0], band[3] - band[1]]
        solid = pdf.make_stream(
            b"0 0 1 rg 0 0 %f %f re f" % (box[2], box[3]), Type=Name.XObject, Subtype=Name.Form, BBox=box
        )
        cover = Dictionary(Type=Name.Annot, Subtype=Name.Square, Rect=band, IC=[0, 0, 1], F=4, AP=Dictionary(N=solid))
        hidden = Dictionary(Type=Name.Annot, Subtype=Name.FreeText, Rect=band, F=2, Contents=String("later"))
        annotations = page.obj.get(Name.Annots, Array())
        for annotation in annotations:
            if annotation.get(Name.Subtype) == Name.Link:
                annotation.AP = Dictionary(N=solid)
        page.obj.Annots = Array([*annotations, pdf.make_indirect(cover), pdf.make_indirect(hidden)])
        pdf.save(path)


def rendered(source: Path, tmp_path: Path) -> Path:
    out = tmp_path / "rendered.pdf"
    work = RenderWork(
        source=source,
        output=out,
        workdir=tmp_path,
        settings=RenderSettings(watermark=WatermarkPolicy(text=STAMP, mode=WatermarkMode.STRUCTURE), max_pages=10),
    )
    render(work, lambda done, total: None)
    return out


def band_pixels(pdf: Path, tmp_path: Path) -> list[object]:
    """The first page's stamp band as poppler draws it (annotations included, as a viewer shows them)."""
    prefix = tmp_path / "page"
    subprocess.run(["pdftoppm", "-r", str(DPI), "-f", "1", "-l", "1", "-png", str(pdf), str(prefix)], check=True)
    (png,) = tmp_path.glob("page*.png")
    with Image.open(png) as image:
        rgb = image.convert("RGB")
        w, h = rgb.size
        left, top, right, bottom = STAMP_BAND
        crop = rgb.crop((int(left * w), int(top * h), int(right * w), int(bottom * h)))
        pixels: list[object] = [crop.getpixel((x, y)) for y in range(crop.height) for x in range(crop.width)]
    png.unlink()
    return pixels


def test_an_annotation_over_the_stamp_is_drawn_under_it(tmp_path: Path) -> None:
    make_sample_pdf(source := tmp_path / "covered.pdf", pages=1)
    add_cover(source)
    assert set(band_pixels(source, tmp_path)) == {BLUE}  # as submitted, the band is all cover

    out = rendered(source, tmp_path)
    pixels = band_pixels(out, tmp_path)
    # The stamp's gray (0.45) at its opacity (0.35), drawn over the blue: (40, 40, 206).
    assert pixels.count(OVER_BLUE) > len(pixels) // 50, "the stamp is hidden under the cover"

    with pikepdf.open(out) as pdf:
        annotations = list(pdf.pages[0].obj.get(Name.Annots, Array()))
        assert [str(a.Subtype) for a in annotations] == ["/Link"]  # the cover was drawn in, the hidden one went
        (link,) = annotations
        assert "/AP" not in link and str(link.A.URI) == LINK_URL  # the link stays, with nothing to draw
    words = subprocess.run(["pdftotext", str(out), "-"], capture_output=True, text=True, check=True).stdout.split()
    assert set(STAMP.split()) <= set(words)


def test_form_fields_become_page_content_under_the_stamp(tmp_path: Path) -> None:
    """A filled form: its values are drawn into the page (still text), its widgets are gone, and so is the form."""
    source = tmp_path / "form.pdf"
    source.write_bytes(realworld.libreoffice_form())
    out = rendered(source, tmp_path)
    with pikepdf.open(out) as pdf:
        assert Name.Annots not in pdf.pages[0].obj and Name.AcroForm not in pdf.Root
    words = subprocess.run(["pdftotext", str(out), "-"], capture_output=True, text=True, check=True).stdout.split()
    assert {word for value in realworld.FIELD_VALUES for word in value.split()} <= set(words)


def test_a_layer_left_open_does_not_take_the_stamp_in(tmp_path: Path) -> None:
    """The page's content ends inside a marked-content sequence of a layer that is off: whatever follows it would
    be in that layer, and hidden. The stamp is drawn after the sequence is closed, so it shows."""
    make_sample_pdf(source := tmp_path / "layered.pdf", pages=1)
    with pikepdf.open(source, allow_overwriting_input=True) as pdf:
        layer = pdf.make_indirect(Dictionary(Type=Name.OCG, Name=String("hidden")))
        pdf.Root.OCProperties = Dictionary(OCGs=[layer], D=Dictionary(OFF=[layer]))
        page = pdf.pages[0]
        resources = page.obj.Resources
        resources.Properties = Dictionary(L0=layer)
        page.contents_add(pdf.make_stream(b"/OC /L0 BDC\n"))  # never closed
        pdf.save(source)
    out = rendered(source, tmp_path)
    over_white = round((1 - OPACITY) * 255) + _BLEND
    pixels = band_pixels(out, tmp_path)
    assert pixels.count((over_white, over_white, over_white)) > len(pixels) // 50, "the stamp is in the hidden layer"
