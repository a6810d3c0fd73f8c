"""JSON: the report dict itself (schema_version 1)."""

from __future__ import annotations

import json
import re
from typing import Any

#: Characters a terminal or an editor acts on, written as \uXXXX escapes (still the same JSON
#: string): C1 controls (U+009B is a one-byte CSI) and the bidi controls that reorder text.
_ACTIVE = re.compile("[\u0080-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def render(report: dict[str, Any]) -> str:
    text = json.dumps(report, indent=2, ensure_ascii=False)
    return _ACTIVE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n"
