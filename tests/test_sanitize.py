"""Sanitization core: active content is found, counted and removed; what is inert stays; loops end."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pikepdf
import pytest
from pikepdf import Dictionary, Name, String
from pypdf import PdfReader

from docjobs.domain.errors import DocJobError
from docjobs.domain.policy import SanitizeMode, SanitizePolicy
from docjobs.pdf.raster import watermark_raster
from docjobs.pdf.sanitize import (
    action_kind,
    check_no_active_content,
    find_active_content,
    sanitize_file,
    strip_active_content,
)
from docjobs.settings.config import ConfigError
from docjobs.settings.policies import PolicyBook
from tests.active_content import ACTIVE_COUNTS, EXECUTABLE, LOOPING_COUNTS, make_active_pdf, make_looping_pdf
from tests.fixtures.samples import LINK_URL, make_sample_pdf

REPO = Path(__file__).resolve().parent.parent

# Names that only active content (or attachments) brings into a file.
ACTIVE_NAMES = frozenset(
    {
        *("/OpenAction", "/AA", "/JS", "/JavaScript", "/Launch", "/SubmitForm", "/ImportData", "/GoToR", "/GoToE"),
        *("/RichMedia", "/EmbeddedFiles", "/EmbeddedFile", "/FileAttachment", "/AF", "/XFA", "/NeedsRendering"),
    }
)


def qpdf_names(path: Path) -> set[str]:
    """Every PDF name (dictionary key or value) of every object, as qpdf reads the file: an independent reader."""
    done = subprocess.run(["qpdf", "--json=2", "--json-key=qpdf", str(path)], capture_output=True, check=True)
    names: set[str] = set()
    pending: list[object] = [json.loads(done.stdout)["qpdf"][1]]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            names.update(key for key in item if key.startswith("/"))
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str) and item.startswith("/"):
            names.add(item)
    return names


def link_actions(path: Path) -> list[list[tuple[str, str]]]:
    """Per page, the (action type, target) of each link annotation, as pypdf reads them."""
    pages = []
    for page in PdfReader(path).pages:
        links = []
        for annotation in page.get("/Annots") or []:
            annotation = annotation.get_object()
            if annotation.get("/Subtype") != "/Link":
                continue
            action = annotation.get("/A")
            kind = str(action["/S"]) if action is not None else ""
            links.append((kind, str(action.get("/URI", "")) if action is not None else ""))
        pages.append(links)
    return pages


@pytest.fixture(scope="module")
def active(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("active") / "active.pdf"
    make_active_pdf(path)
    return path


def stripped_copy(source: Path, dest: Path, *, keep_attachments: bool = False) -> dict[str, int]:
    with pikepdf.open(source) as pdf:
        removed = strip_active_content(pdf, keep_attachments=keep_attachments)
        pdf.save(dest)
    return removed


def test_the_fixture_has_every_kind(active: Path) -> None:
    assert find_active_content(active) == ACTIVE_COUNTS
    assert {"/OpenAction", "/JS", "/Launch", "/SubmitForm", "/RichMedia", "/XFA"} <= qpdf_names(active)
    assert PdfReader(active).attachments == {"setup.exe": [EXECUTABLE]}


def test_strip_removes_everything_and_keeps_the_links(active: Path, tmp_path: Path) -> None:
    removed = stripped_copy(active, out := tmp_path / "out.pdf")
    assert removed == ACTIVE_COUNTS
    assert find_active_content(out) == {}
    assert not qpdf_names(out) & ACTIVE_NAMES
    assert PdfReader(out).attachments == {}
    before, after = link_actions(active), link_actions(out)
    assert [len(links) for links in after] == [len(links) for links in before]  # inert links stay in place
    assert ("/URI", LINK_URL) in after[0] and ("/GoTo", "") in after[0]
    assert ("/Launch", "") not in after[0] and ("", "") in after[0]  # the launch link is still there, inert
    with pikepdf.open(out) as pdf:
        outline = pdf.Root.Outlines.First
        assert "/A" not in outline and str(outline.Next.A.S) == "/GoTo"  # bookmark: import gone, GoTo kept
        assert [str(field.T) for field in pdf.Root.AcroForm.Fields] == ["name", "send"]  # fields stay, inert


def test_keep_attachments_keeps_the_files(active: Path, tmp_path: Path) -> None:
    removed = stripped_copy(active, out := tmp_path / "out.pdf", keep_attachments=True)
    assert removed == {kind: n for kind, n in ACTIVE_COUNTS.items() if kind != "embedded_file"}
    assert find_active_content(out, keep_attachments=True) == {}
    assert find_active_content(out) == {"embedded_file": ACTIVE_COUNTS["embedded_file"]}
    assert PdfReader(out).attachments == {"setup.exe": [EXECUTABLE]}
    assert {"/FileAttachment", "/AF"} <= qpdf_names(out)


def test_loops_end(tmp_path: Path) -> None:
    make_looping_pdf(looping := tmp_path / "loops.pdf")
    assert find_active_content(looping) == LOOPING_COUNTS
    out = tmp_path / "out.pdf"
    assert stripped_copy(looping, out) == LOOPING_COUNTS
    assert find_active_content(out) == {}
    with pikepdf.open(out) as pdf:
        head = pdf.Root.OpenAction
        assert str(head.S) == "/GoTo" and "/Next" not in head  # the chain is cut at its script
        assert len(pdf.pages[0].obj.Annots) == 2  # the link (listed twice) stays, without its action


def test_next_chain_after_an_inert_action(tmp_path: Path) -> None:
    """GoTo -> Launch -> URI: the launch and what follows it go, the GoTo stays."""
    make_sample_pdf(source := tmp_path / "chain.pdf", pages=1)
    with pikepdf.open(source, allow_overwriting_input=True) as pdf:
        uri = Dictionary(S=Name.URI, URI=String("https://example.com/"))
        launch = Dictionary(S=Name.Launch, F=String("a.exe"), Next=uri)
        pdf.Root.OpenAction = Dictionary(S=Name.GoTo, D=[pdf.pages[0].obj, Name.Fit], Next=[launch])
        pdf.save(source)
    out = tmp_path / "out.pdf"
    assert stripped_copy(source, out) == {"launch": 1}
    with pikepdf.open(out) as pdf:
        assert str(pdf.Root.OpenAction.S) == "/GoTo" and "/Next" not in pdf.Root.OpenAction


@pytest.mark.parametrize(
    ("action", "kind"),
    [
        (Dictionary(S=Name.URI, URI=String("https://example.com/")), None),
        (Dictionary(S=Name.URI, URI=String(" Java\tScript:app.alert(1)")), "javascript"),
        (Dictionary(S=Name.URI, URI=String("file:///etc/passwd")), "launch"),
        (Dictionary(S=Name.Named, N=Name.NextPage), None),
        (Dictionary(S=Name.ResetForm), None),
        (Dictionary(S=Name.SetOCGState, State=[Name.OFF]), "visibility"),
        (Dictionary(S=Name.Hide, T=String("stamp"), H=False), "visibility"),
        (Dictionary(S=Name.Thread, D=0), None),
        (Dictionary(S=Name.Thread, D=0, F=String("other.pdf")), "goto_remote"),
        (Dictionary(S=Name.GoToE, T=Dictionary(R=Name.C, N=String("x"))), "goto_remote"),
        (Dictionary(S=Name.Rendition, OP=0), "media"),
        (Dictionary(S=Name.GoTo, D=[0, Name.Fit], JS=String("app.alert(1)")), "javascript"),  # /JS on anything
        (Dictionary(S=Name.SomethingNew), "other_action"),
        (Dictionary(S=String("JavaScript")), "other_action"),
    ],
)
def test_action_kinds(action: Dictionary, kind: str | None) -> None:
    assert action_kind(action) == kind


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_sanitize_file_modes(active: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.pdf"
    copy.write_bytes(active.read_bytes())
    with pytest.raises(DocJobError) as refused:
        sanitize_file(copy, SanitizePolicy(mode=SanitizeMode.FAIL))
    assert refused.value.code == "input.active_content" and "javascript" in refused.value.message
    assert "setup.exe" not in refused.value.message
    assert sanitize_file(copy, SanitizePolicy(mode=SanitizeMode.KEEP)) == {}
    assert sha256(copy) == sha256(active)  # neither mode touches the file
    assert sanitize_file(copy, SanitizePolicy()) == ACTIVE_COUNTS
    assert find_active_content(copy) == {}
    make_sample_pdf(clean := tmp_path / "clean.pdf", pages=1)
    digest = sha256(clean)
    assert sanitize_file(clean, SanitizePolicy()) == {} and sha256(clean) == digest  # nothing to do: not rewritten
    assert sanitize_file(clean, SanitizePolicy(mode=SanitizeMode.FAIL)) == {}


def test_release_gate(active: Path, tmp_path: Path) -> None:
    with pytest.raises(DocJobError) as residue:
        check_no_active_content(active, SanitizePolicy())
    assert residue.value.code == "sanitize.residue"
    assert check_no_active_content(active, SanitizePolicy(mode=SanitizeMode.KEEP)) == []
    stripped_copy(active, out := tmp_path / "out.pdf", keep_attachments=True)
    assert check_no_active_content(out, SanitizePolicy(keep_attachments=True)) == ["no_active_content"]
    with pytest.raises(DocJobError):
        check_no_active_content(out, SanitizePolicy())  # attachments were kept, this policy does not allow them


def test_show_and_hide_actions_are_active_content(tmp_path: Path) -> None:
    """A page that hides a layer when it opens and a link that shows an annotation: what a certified document
    shows could change after signing. Stripped (the link stays, without its action), refused in fail mode,
    and residue at verify."""
    make_sample_pdf(source := tmp_path / "toggles.pdf", pages=1)
    with pikepdf.open(source, allow_overwriting_input=True) as pdf:
        layer = pdf.make_indirect(Dictionary(Type=Name.OCG, Name=String("cover")))
        pdf.Root.OCProperties = Dictionary(OCGs=[layer], D=Dictionary(ON=[layer]))
        page = pdf.pages[0].obj
        page.AA = Dictionary(O=Dictionary(S=Name.SetOCGState, State=[Name.OFF, layer]))
        (link,) = [annot for annot in page.Annots if annot.get("/Subtype") == Name.Link]
        link.A = Dictionary(S=Name.Hide, T=String("stamp"), H=False, Next=Dictionary(S=Name.SetOCGState, State=[]))
        pdf.save(source)
    assert find_active_content(source) == {"visibility": 3}
    with pytest.raises(DocJobError) as refused:
        sanitize_file(source, SanitizePolicy(mode=SanitizeMode.FAIL))
    assert refused.value.code == "input.active_content" and "visibility" in refused.value.message
    with pytest.raises(DocJobError) as residue:
        check_no_active_content(source, SanitizePolicy())
    assert residue.value.code == "sanitize.residue"
    out = tmp_path / "out.pdf"
    assert stripped_copy(source, out) == {"visibility": 3}
    assert find_active_content(out) == {}
    assert not {"/SetOCGState", "/Hide"} & qpdf_names(out)
    with pikepdf.open(out) as pdf:
        page = pdf.pages[0].obj
        assert "/AA" not in page
        assert [annot for annot in page.Annots if annot.get("/Subtype") == Name.Link]  # the link stays


def test_raster_mode_drops_document_level_content_by_itself(active: Path, tmp_path: Path) -> None:
    watermark_raster(active, out := tmp_path / "raster.pdf", "PREVIEW", dpi=36, workdir=tmp_path)
    assert find_active_content(out) == {}
    assert not qpdf_names(out) & ACTIVE_NAMES


def test_shipped_policies_strip_and_typos_are_refused(tmp_path: Path) -> None:
    book = PolicyBook.load(REPO / "docjobs" / "settings" / "policies.toml")
    assert {name: policy.sanitize for name, policy in book.policies.items()} == dict.fromkeys(
        book.policies, SanitizePolicy(mode=SanitizeMode.STRIP, keep_attachments=False)
    )
    (typo := tmp_path / "policies.toml").write_text(
        '[policies.x.watermark]\ntext = "X"\n[policies.x.sanitize]\nkeep_attachment = true\n'
    )
    with pytest.raises(ConfigError, match=r"sanitize\.keep_attachment"):
        PolicyBook.load(typo)
