"""JSON: the report dict itself (schema_version 1)."""

from __future__ import annotations

import json
import re
from typing import Any

from oomdoctor.report.labels import ACTIVE_BEYOND_C0

#: Characters a terminal or an editor acts on, written as \uXXXX escapes (still the same JSON
#: string): C1 controls (U+009B is a one-byte CSI) and the bidi controls that reorder text.
_ACTIVE = re.compile(f"[{ACTIVE_BEYOND_C0}]")


def render(report: dict[str, Any]) -> str:
    text = json.dumps(report, indent=2, ensure_ascii=False)
    return _ACTIVE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n"
