"""The one filter for text that reaches a terminal outside a report: stderr messages, ``rules``
output, click's usage errors. Secrets are masked (``secrets.redact_text``: a message may echo a
path or a log's text) and control characters are shown, never acted on (``labels.one_line``: no
OSC 52 clipboard write, clear-screen or erase-line; a newline in a file name shows as ``␊`` and
starts no line). Reports do the same through ``redact_report`` and ``labels.visible_tree``."""

from __future__ import annotations

from oomdoctor.report.labels import one_line, visible


def safe_line(text: object) -> str:
    """``text`` as one line: secrets masked, control characters and newlines visible."""
    return one_line(_redacted(str(text)))


def safe_lines(text: object) -> str:
    """``text`` with secrets masked and control characters visible; its newlines stay."""
    return visible(_redacted(str(text)), keep="\n")


def _redacted(text: str) -> str:
    try:
        from oomdoctor.report.secrets import redact_text

        return redact_text(text)
    except Exception:  # a bug in the redactor must not hide the message itself
        return text
