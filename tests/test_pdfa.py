"""The partial PDF/A check (docjobs/pdf/pdfa.py): each rule it knows finds what breaks it, and a stamped and
signed PDF/A-2b document keeps its claim; page-validation, the independent validator, joins the verdict."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pikepdf
import pytest
from pikepdf import Name

from docjobs.domain.errors import DocJobError
from docjobs.domain.policy import GeneratePolicy, PdfVariant
from docjobs.generate.weasy import html_to_pdf
from docjobs.pdf import pdfa
from docjobs.pdf.budgets import DEFAULT_BUDGETS
from docjobs.pdf.watermark import watermark_structure
from docjobs.signing.dev_ca import ensure_dev_signer
from docjobs.signing.sign import sign_pdf
from tests.fixtures.pdfa_samples import make_pdfa


@pytest.fixture(scope="module")
def archival(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pdfa(tmp_path_factory.mktemp("pdfa") / "letter.pdf")


def edited(src: Path, dst: Path, edit: str) -> Path:
    """`src` with one rule broken, as `edit` names it."""
    with pikepdf.open(src) as pdf:
        page = pdf.pages[0].obj
        if edit == "no_output_intent":
            del pdf.Root[Name.OutputIntents]
        elif edit == "font_not_embedded":
            fonts = page.Resources.Font
            fonts[Name.H] = pikepdf.Dictionary(Type=Name.Font, Subtype=Name.Type1, BaseFont=Name.Helvetica)
        elif edit == "xmp_dates":
            pdf.docinfo[Name.ModDate] = "D:20200101000000Z"
        elif edit == "active_content":
            pdf.Root.OpenAction = pikepdf.Dictionary(S=Name.JavaScript, JS="app.alert(1)")
        elif edit == "annotation":
            link = pikepdf.Dictionary(Type=Name.Annot, Subtype=Name.Square, Rect=[10, 10, 50, 50], F=4)
            page.Annots = pdf.make_indirect(pikepdf.Array([link]))  # an area and no appearance
        elif edit == "not_claimed":
            del pdf.Root[Name.Metadata]
        pdf.save(dst)
    return dst


def test_a_pdf_a_2b_document_claims_2b_and_passes(archival: Path) -> None:
    with pikepdf.open(archival) as pdf:
        assert pdfa.claim(pdf) == "2b"
    assert pdfa.problems(archival) == []


@pytest.mark.parametrize(
    "edit", ["no_output_intent", "font_not_embedded", "xmp_dates", "active_content", "annotation", "not_claimed"]
)
def test_each_broken_rule_is_found(archival: Path, tmp_path: Path, edit: str) -> None:
    assert edit in pdfa.problems(edited(archival, tmp_path / "broken.pdf", edit))


def test_the_walks_are_bounded_and_follow_a_cycle_once(archival: Path, tmp_path: Path) -> None:
    """A form that draws itself (a cycle) and a chain of forms: each form is looked at once, and a walk past the
    budget fails `input.too_complex` (never a recursion through the document)."""
    with pikepdf.open(archival) as pdf:
        page = pdf.pages[0].obj
        forms = [pdf.make_stream(b"", Type=Name.XObject, Subtype=Name.Form, BBox=[0, 0, 1, 1]) for _ in range(50)]
        for form, drawn in zip(forms, [*forms[1:], forms[0]], strict=True):  # a ring of fifty forms
            form.Resources = pikepdf.Dictionary(XObject=pikepdf.Dictionary(F=drawn))
        page.Resources.XObject = pikepdf.Dictionary(F=forms[0])
        pdf.save(ring := tmp_path / "ring.pdf")
    assert pdfa.problems(ring) == []
    with pytest.raises(DocJobError) as caught:
        pdfa.problems(ring, dataclasses.replace(DEFAULT_BUDGETS, max_objects=20))
    assert caught.value.code == "input.too_complex"


def test_the_stamp_and_the_signature_keep_pdf_a_2b(archival: Path, tmp_path: Path) -> None:
    watermark_structure(archival, stamped := tmp_path / "stamped.pdf", "CONFIDENTIAL")
    assert pdfa.problems(stamped) == []
    sign_pdf(stamped, signed := tmp_path / "signed.pdf", ensure_dev_signer(tmp_path / "ca"))
    assert pdfa.problems(signed) == []
    outcome = pdfa.outcome(archival, signed)
    assert outcome is not None and (outcome.claimed, outcome.kept, outcome.reason) == ("2b", True, None)
    with pikepdf.open(signed) as pdf:
        assert b"xmp:ModifyDate" in pdf.Root.Metadata.read_bytes()  # the signer dated the XMP too


def test_the_stamps_opacity_breaks_pdf_a_1b(tmp_path: Path) -> None:
    """PDF/A-1 forbids transparency; the stamp is drawn at 35% opacity, so the status says the claim is lost."""
    source = make_pdfa(tmp_path / "a1.pdf", variant="pdf/a-1b")
    assert pdfa.problems(source) == []
    watermark_structure(source, stamped := tmp_path / "stamped.pdf", "CONFIDENTIAL")
    outcome = pdfa.outcome(source, stamped)
    assert outcome is not None and (outcome.claimed, outcome.kept, outcome.reason) == ("1b", False, "transparency")


def test_an_output_without_the_claim_is_reported_dropped(archival: Path, tmp_path: Path) -> None:
    outcome = pdfa.outcome(archival, edited(archival, tmp_path / "plain.pdf", "not_claimed"))
    assert outcome is not None and (outcome.kept, outcome.reason) == (False, "claim_dropped")


def test_no_claim_on_either_side_reports_nothing(archival: Path, tmp_path: Path) -> None:
    plain = edited(archival, tmp_path / "plain.pdf", "not_claimed")
    assert pdfa.outcome(plain, plain) is None


# What page-validation (the independent validator) finds of each broken rule above: its own rule, or nothing.
INDEPENDENT = {
    "no_output_intent": ["PDFA2B-DEVICE-RGB-001"],  # the page's colours are then device RGB without an intent
    "font_not_embedded": [],  # a font in the resources that nothing draws with: page looks at the fonts used
    "xmp_dates": [],  # page does not compare the Info dictionary's dates with the XMP's
    "active_content": ["PDFA2B-ACTION-TYPE-001"],
    "annotation": ["PDFA2B-ANNOTATION-AP-REQUIRED-001"],
}


@pytest.mark.parametrize("edit", sorted(INDEPENDENT))
def test_both_validators_judge_each_broken_rule_and_the_status_says_where_they_differ(
    archival: Path, tmp_path: Path, edit: str
) -> None:
    broken = edited(archival, tmp_path / "broken.pdf", edit)
    assert pdfa.independent_problems(broken) == INDEPENDENT[edit]
    outcome = pdfa.outcome(archival, broken)
    assert outcome is not None and not outcome.kept and outcome.reason == edit
    both = bool(INDEPENDENT[edit])
    assert outcome.validators == {"docjobs": False, "page": not both}
    assert outcome.disagreement == (None if both else f"docjobs: {edit}")


def test_what_only_the_independent_validator_finds_is_not_kept(archival: Path, tmp_path: Path) -> None:
    """WeasyPrint compresses its XMP stream, which PDF/A-2 forbids: docjobs' check misses it, page does not. A
    signed release has pyHanko's XMP instead, stored plain: both pass it."""
    assert pdfa.problems(archival) == [] and pdfa.independent_problems(archival) == ["PDFA2B-METADATA-FILTER-001"]
    outcome = pdfa.outcome(archival, archival)
    assert outcome is not None and (outcome.kept, outcome.reason) == (False, "independent_check")
    assert outcome.validators == {"docjobs": True, "page": False}
    assert outcome.disagreement == "page: PDFA2B-METADATA-FILTER-001"
    watermark_structure(archival, stamped := tmp_path / "stamped.pdf", "CONFIDENTIAL")
    sign_pdf(stamped, signed := tmp_path / "signed.pdf", ensure_dev_signer(tmp_path / "ca"))
    outcome = pdfa.outcome(archival, signed)
    assert outcome is not None and outcome.kept and outcome.validators == {"docjobs": True, "page": True}


@pytest.mark.parametrize("variant", [PdfVariant.PDF_A_2B, PdfVariant.PDF_A_3B])
def test_what_generate_makes_passes_both_validators(tmp_path: Path, variant: PdfVariant) -> None:
    """`generate` stores the XMP plain (docjobs/generate/weasy.py, `unfilter_metadata`)."""
    (tmp_path / "index.html").write_text("<h1>Referral</h1><p>Dear colleague.</p>")
    output = tmp_path / "generated.pdf"
    html_to_pdf(tmp_path, output, GeneratePolicy(pdf_variant=variant), max_pages=5, on_pages=lambda done, total: None)
    assert pdfa.problems(output) == [] and pdfa.independent_problems(output) == []
    outcome = pdfa.outcome(output, output)
    assert outcome is not None and outcome.kept and outcome.validators == {"docjobs": True, "page": True}
