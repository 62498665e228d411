"""The AdmissionReview sent and the checks on the answer (pure)."""

from __future__ import annotations

import pytest

from sandbox.kube.admission.review import InvalidResponse, Verdict, build_review, verify
from tests.admission.builders import answer, attrs, pod


def test_a_generate_name_create_has_no_name_and_no_old_object() -> None:
    """Rule: a generateName CREATE is reviewed as AdmissionReview v1 without request.name, with
    oldObject null, dryRun false, CreateOptions and the caller's userInfo."""
    review = build_review(attrs(pod(generate_name="job-")), pod(generate_name="job-"))
    request = review["request"]
    assert review["apiVersion"] == "admission.k8s.io/v1"
    assert "name" not in request
    assert request["oldObject"] is None
    assert request["operation"] == "CREATE"
    assert request["dryRun"] is False
    assert request["options"] == {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
    assert request["userInfo"] == {
        "username": "alice",
        "uid": "u-1",
        "groups": ["system:authenticated"],
    }
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert request["requestResource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert "subResource" not in request


def test_every_review_gets_a_fresh_uid() -> None:
    """Rule: every webhook call gets a fresh request.uid."""
    first = build_review(attrs(), pod("p"))["request"]["uid"]
    assert first != build_review(attrs(), pod("p"))["request"]["uid"]


def test_delete_sends_a_null_object_and_delete_options() -> None:
    """Rule: a DELETE review has object null, the stored oldObject and DeleteOptions."""
    review = build_review(attrs(None, "DELETE", old=pod("p")), None)
    assert review["request"]["object"] is None
    assert review["request"]["oldObject"] == pod("p")
    assert review["request"]["options"]["kind"] == "DeleteOptions"


def test_a_valid_answer() -> None:
    """Rule: a 200 AdmissionReview v1 echoing the uid, with patch and patchType JSONPatch, is
    accepted with its warnings."""
    review = build_review(attrs(), pod("p"))
    body = answer(review, patch=[{"op": "add", "path": "/x", "value": 1}], warnings=["w"])
    verdict = verify(body, review["request"]["uid"])
    assert verdict == Verdict(True, None, b'[{"op": "add", "path": "/x", "value": 1}]', ["w"])


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        pytest.param(
            lambda b: b["response"].update(uid="other"), "expected response.uid", id="uid"
        ),
        pytest.param(lambda b: b.update(apiVersion="admission.k8s.io/v1beta1"), "Kind", id="gvk"),
        pytest.param(
            lambda b: b["response"].pop("patchType"), "not response.patchType", id="no-type"
        ),
        pytest.param(lambda b: b["response"].pop("patch"), "not response.patch", id="no-patch"),
        pytest.param(lambda b: b["response"].update(patchType="Merge"), "invalid", id="bad-type"),
        pytest.param(lambda b: b["response"].update(patch="%%%"), "base64", id="not-base64"),
        pytest.param(lambda b: b.pop("response"), "absent", id="no-response"),
    ],
)
def test_invalid_answers(mutate, message: str) -> None:
    """Rule: a wrong uid, a wrong apiVersion/kind, patch without patchType (or the reverse), a
    patchType other than JSONPatch, a patch that is not base64 or no response at all make an
    invalid answer (a failed call)."""
    review = build_review(attrs(), pod("p"))
    body = answer(review, patch=[])
    mutate(body)
    with pytest.raises(InvalidResponse, match=message):
        verify(body, review["request"]["uid"])
