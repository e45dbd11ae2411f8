"""Redaction gaps of issue 24: ``layout --text`` and secrets whose name is masked first or
quoted differently (the AWS secret kept its value after its key id was masked)."""

from __future__ import annotations

import pytest

from test_redact import HIDDEN, _cli, _policy_reset, assert_clean, home, session  # noqa: F401
from replayer.core.redact import MASK, redact

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def test_layout_text_masks_every_planted_kind(capsys, session, home):  # noqa: F811
    rc, out, _ = _cli(capsys, "layout", str(session), "--text", "--template", "chatml", "--tokenizer", "estimate")
    assert rc == 0 and "<|im_start|>user" in out
    assert_clean(out, home)


def test_layout_text_no_redact_is_exact(capsys, session, home):  # noqa: F811
    rc, out, _ = _cli(capsys, "layout", str(session), "--text", "--template", "chatml", "--tokenizer", "estimate",
                      "--no-redact")
    assert rc == 0 and all(h in out for h in HIDDEN[:3]) and str(home) in out


@pytest.mark.parametrize("text", [
    f"AKIAIOSFODNN7EXAMPLE = {AWS_SECRET}",
    f"AKIAIOSFODNN7EXAMPLE:{AWS_SECRET}",
    f"aws_secret_access_key='{AWS_SECRET}'",
    f"--aws-secret-access-key {AWS_SECRET}",
    f'"SecretAccessKey": "{AWS_SECRET}"',
])
def test_aws_secret_value_is_masked(text):
    out = redact(text)
    assert AWS_SECRET not in out and MASK in out


@pytest.mark.parametrize("text", ["--max-tokens 4096", "--token-budget 12345678", "n_tokens = 12345678",
                                  "see the --secret-file option"])
def test_lookalikes_are_left(text):
    assert redact(text) == text
