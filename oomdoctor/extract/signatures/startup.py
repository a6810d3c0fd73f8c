"""Startup lines: server_args, the per-rank memory checkpoints, the summary line, readiness.

Formats: ../shared/reference/sglang-logs.md §2 (every version from 0.3.6 to 0.5.23).
"""

from __future__ import annotations

import re

from oomdoctor import units
from oomdoctor.extract.signatures.base import Signature, convert, groups, sig
from oomdoctor.model import Scalar

_NUM = r"-?\d+(?:\.\d+)?"
#: A size in GB as SGLang prints it, or with a decimal comma or an exponent (units.decimal reads
#: it). Any number of digits: one too long to believe is refused with a notice naming its line.
_SIZE = r"[\d.,]+(?:[eE][+-]?\d{1,3})?"


def _load_end(m: re.Match[str]) -> dict[str, Scalar]:
    data = groups(m)
    data["has_usage"] = m.group("w") is not None
    data["has_elapsed"] = "elapsed=" in m.group(0)
    return data


def _kv(m: re.Match[str]) -> dict[str, Scalar]:
    data = groups(m)
    k, v, kv = (units.number(m.group(g) or "", gib=True) for g in ("k", "v", "kv"))
    if kv is not None:
        data["total"] = float(kv)
    elif k is not None and v is not None:
        data["total"] = float(k) + float(v)
    return data


def _summary(m: re.Match[str]) -> dict[str, Scalar]:
    data = groups(m)
    if data.get("chunked") == "None":
        data["chunked"] = None
    return data


SIGNATURES: tuple[Signature, ...] = (
    sig("server_args", "server_args=", r"server_args=(?P<body>(?:ServerArgs\(|\{).*)"),
    sig(
        "dist_init_end",
        ("Init torch distributed ends", "Memory baseline taken"),
        r"(?:Init torch distributed ends\.(?: elapsed=[\d.]+ s,)?|Memory baseline taken\.)"
        r" mem usage=(?P<usage>" + _SIZE + r") GB",
    ),
    sig(
        "load_begin",
        "Load weight begin",
        r"Load weight begin\. avail mem=(?P<avail>" + _SIZE + r") GB",
    ),
    sig(
        "load_end",
        "Load weight end",
        r"Load weight end\..*?(?:type=(?P<model>\w+), )?(?:dtype=(?P<dtype>[\w.]+), )?"
        r"(?:quant=[^,]*, (?:[a-z_]+=[^,]*, )*)?avail mem=(?P<avail>" + _SIZE + r") GB"
        r"(?:, mem usage=(?P<w>" + _SIZE + r") GB)?",
        _load_end,
    ),
    sig(
        "kv_allocated",
        ("KV Cache is allocated", "KV Cache VA upper bound"),
        # The label is what precedes, from the first word: tried from there only (`^\s*`), as a
        # search from every position would scan the rest of a long line once per position.
        r"^\s*(?:(?P<label>\S.*?) )?KV Cache (?:is allocated|VA upper bound)\. "
        r"(?:dtype: (?P<dtype>\S+), )?#tokens: (?P<tokens>\d+), "
        r"(?:K size: (?P<k>"
        + _SIZE
        + r") GB, V size: (?P<v>"
        + _SIZE
        + r") GB|KV size: (?P<kv>"
        + _SIZE
        + r") GB)",
        _kv,
    ),
    sig("pool_end", "Memory pool end", r"Memory pool end\. avail mem=(?P<avail>" + _SIZE + r") GB"),
    sig(
        "graph_begin",
        ("graph begin", "Graph begin"),
        r"Capture (?P<what>.*?)graph begin\..*?avail mem=(?P<avail>" + _SIZE + r") GB",
        flags=re.IGNORECASE,
    ),
    sig(
        "graph_end",
        ("graph end", "Graph end"),
        r"Capture (?P<what>.*?)graph end\..*?mem usage=(?P<g>" + _SIZE + r") GB[.,] "
        r"avail mem=(?P<avail>" + _SIZE + r") GB",
        flags=re.IGNORECASE,
    ),
    sig(
        "capture_progress",
        ("Capturing batches", "Capturing prefill shape"),
        r"Capturing (?:batches|prefill shape) \((?:(?:bs|num_tokens)=(?P<bs>\d+) )?"
        r"avail_mem=(?P<avail>" + _SIZE + r") GB\)",
    ),
    sig(
        "load_progress",
        "checkpoint shards",
        r"Loading (?:safetensors |pt )?checkpoint shards",
    ),
    sig(
        "summary",
        "max_total_num_tokens=",
        r"max_total_num_tokens=(?P<tokens>-?\d+), (?:chunked_prefill_size=(?P<chunked>-?\d+|None), )?"
        r"max_prefill_tokens=(?P<max_prefill>\d+), max_running_requests=(?P<max_running>\d+), "
        r"context_len=(?P<context_len>\d+)(?:, available_(?:gpu|cpu)_mem=(?P<avail>"
        + _SIZE
        + r") GB)?",
        _summary,
    ),
    sig(  # SGLang's, and SGLang Omni 0.1.9's launcher after its warm-up (serve/launcher.py)
        "ready",
        ("fired up and ready to roll", "; the server is ready"),
        r"The server is fired up and ready to roll"
        r"|Server warmup of \d+ request\(s\) finished in [\d.]+ s; the server is ready",
    ),
    sig(
        "mm_fraction_adjust",
        (
            "because this is a multimodal model",
            "Dynamically adjusted --mem-fraction-static",
            "adjust --mem-fraction-static for multimodal",
        ),
        r"(?:reduce --mem-fraction-static to (?P<to>\d+(?:\.\d+)?) because this is a multimodal "
        r"model|Dynamically adjusted --mem-fraction-static from: (?P<frm>\d+(?:\.\d+)?) to: "
        r"(?P<to2>\d+(?:\.\d+)?)"
        r"|adjust --mem-fraction-static for multimodal models)",
    ),
    sig(
        "launch_flag",
        ("--mem-fraction-static", ".engine.mem_fraction_static"),
        r"(?:^|\s)--(?:(?P<stage>[\w-]+)\.engine\.mem_fraction_static|mem-fraction-static)[ =]"
        r"(?P<y>0?\.\d+|1(?:\.0+)?)(?:\s|$)",
    ),
    sig(
        "mm_kv_reserve",
        "KV budget for post-sizing multimodal",
        r"Reserving (?P<gb>"
        + _SIZE
        + r") GB of the KV budget for post-sizing multimodal allocations",
    ),
    sig(
        "kv_below_context",
        "fewer than --context-length",
        r"KV pool holds (?P<tokens>\d+) tokens, fewer than --context-length (?P<context>\d+)",
    ),
    sig(
        "symm_mem_prealloc",
        "symmetric memory prealloc size",
        r"setting symmetric memory prealloc size to (?P<gb>\d+)GB",
    ),
)


# ---------------------------------------------------------------------------------------------
# server_args: parse, never eval. Both `ServerArgs(k=v, ...)` and `{'k': v, ...}`.

_KEY = re.compile(r"\s*(?:'(?P<q>\w+)'\s*:\s*|(?P<b>\w+)=)")


def parse_server_args(body: str, refused: list[str] | None = None) -> dict[str, Scalar]:
    """Parse the printed server_args into scalars; nested values are kept as their text.

    Tolerates truncation: whatever pairs were printed completely are returned.
    """
    if body.startswith("ServerArgs("):
        return parse_pairs(body[len("ServerArgs(") :], refused)
    if body.startswith("{"):
        return parse_pairs(body[1:], refused)
    return {}


def parse_pairs(inner: str, refused: list[str] | None = None) -> dict[str, Scalar]:
    """``k=v, ...`` or ``'k': v, ...`` up to the closing bracket (vLLM's args and config too).

    A number outside the physical range (units.in_range) is kept as None, and ``key=text`` is
    added to ``refused``."""
    out: dict[str, Scalar] = {}
    pos, n = 0, len(inner)
    while pos < n:
        m = _KEY.match(inner, pos)
        if not m:
            break
        key = m.group("q") or m.group("b")
        end = _value_end(inner, m.end())
        raw = inner[m.end() : end].strip()
        out[key] = _literal(raw)
        if out[key] is None and refused is not None and units.refused(raw):
            refused.append(f"{key}={raw[:40]}")
        pos = end + 1  # skip the comma
        if end >= n:
            break
    return out


def _value_end(text: str, start: int) -> int:
    """Index of the comma (or closing bracket) that ends the value starting at ``start``."""
    depth = 0
    quote: str | None = None
    i = start
    n = len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c in "([{<":
            depth += 1
        elif c in ")]}>":
            if depth == 0:
                return i
            depth -= 1
        elif c == "," and depth == 0:
            return i
        i += 1
    return n


_STR = re.compile(r"""^(?:'(?P<s>(?:[^'\\]|\\.)*)'|"(?P<d>(?:[^"\\]|\\.)*)")$""")


def _literal(raw: str) -> Scalar:
    if raw in ("None", "null"):
        return None
    if raw in ("True", "true"):
        return True
    if raw in ("False", "false"):
        return False
    m = _STR.match(raw)
    if m:
        s = m.group("s") if m.group("s") is not None else m.group("d")
        return (
            s.encode("utf-8", "backslashreplace").decode("unicode_escape", "replace")
            if "\\" in s
            else s
        )
    if re.fullmatch(_NUM + r"(?:[eE][+-]?\d+)?", raw):
        return convert(raw)
    if raw in ("inf", "-inf", "nan"):  # how Python prints float('inf'): not a setting to believe
        return None
    return raw  # lists, dicts, enums, paths: keep the printed text
