"""DOCJOBS_FAULT=compromised-release: a document that took over every parser it reached, as the security review's
H2 plays it. What each job's document asks is in its /Subject (`docjobs-release-attack:{json}`):

* `javascript`: render leaves an `/OpenAction` JavaScript in its output (sanitization undone);
* `no_watermark`: render stamps no watermark;
* `reason`: the sign child writes a /Reason naming that tenant instead of the job's (and is otherwise honest:
  its byte range and hole are what the worker asked for, so that only the dictionary gives it away);

and `verify`, taken over too, answers "valid" without reading anything. Only the release gate (its own sandbox,
pure-Python readers: docjobs/pdf/release_gate.py) and the worker's comparison stand in the way: nothing may be
signed. A document without a plan gets the honest stages (but this lying `verify`)."""

from __future__ import annotations

import json
from dataclasses import replace

import pikepdf
from pikepdf import Dictionary, Name, String

from docjobs.domain.models import RenderDone, SignatureVerdict, VerifyDone
from docjobs.isolation import stage_work
from docjobs.isolation.stage_work import ENTRIES, ProgressFn, RenderWork, SignDone, SignWork, VerifyWork
from tests.faults.compromised_child import read_plan

PLAN_PREFIX = "docjobs-release-attack:"


def attacked_render(work: RenderWork, progress: ProgressFn) -> RenderDone:
    plan = read_plan(work.source, PLAN_PREFIX)
    if plan.get("no_watermark"):
        work = work.model_copy(update={"settings": work.settings.model_copy(update={"watermark": None})})
    done = stage_work.render(work, progress)
    if plan.get("javascript"):
        with pikepdf.open(work.output, allow_overwriting_input=True) as pdf:
            pdf.Root.OpenAction = pdf.make_indirect(Dictionary(S=Name.JavaScript, JS=String("app.alert('owned')")))
            pdf.docinfo["/Subject"] = PLAN_PREFIX + json.dumps(plan)  # for the sign child
            pdf.save(work.output)
    return done


def attacked_sign(work: SignWork, progress: ProgressFn) -> SignDone:
    """The honest sign, but writing another tenant's name where viewers show who asked (`/Reason`)."""
    plan = read_plan(work.source, PLAN_PREFIX)
    if plan.get("reason"):
        work = work.model_copy(update={"tenant": str(plan["reason"])})
    return stage_work.sign(work, progress)


def lying_verify(work: VerifyWork, progress: ProgressFn) -> VerifyDone:
    """Reads nothing and answers what an honest verify answers for a valid, signed, faithful document."""
    signature = None
    if work.trust is not None:
        signature = SignatureVerdict(
            intact=True,
            valid=True,
            trusted=True,
            bottom_line=True,
            coverage="entire_file",
            level="B-B",
            signer_subject="docjobs",
            tenant=work.tenant,
            docmdp=1,
        )
    checks = ["page_count", "geometry", "qpdf_check", "second_reader", "watermark_every_page", "no_active_content"]
    return VerifyDone(signature=signature, fidelity_checks=checks, pdfa=None)


ENTRIES = {
    **ENTRIES,
    "render": replace(stage_work.RENDER, run=attacked_render),
    "sign": replace(stage_work.SIGN, run=attacked_sign),
    "verify": replace(stage_work.VERIFY, run=lying_verify),
}

__all__ = ["ENTRIES"]
