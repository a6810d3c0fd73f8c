"""Hostile log and process text stays inert in every report (issue 14, items 2 and 3).

Markdown: rendered by markdown-it (GFM-like: tables, strikethrough, linkify, raw HTML on) and by
cmark-gfm (GitHub's renderer, raw HTML let through), it holds no HTML element, link, mention or
issue reference that came from the log. The terminal: no ESC (or other control) byte from the
input reaches stdout. The picture: a logged 10⁹ GB draws a bar of the usual width in little memory.
"""

from __future__ import annotations

import copy
import json
import math
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from oomdoctor.cli import cli
from oomdoctor.report import picture
from oomdoctor.report.labels import one_line, visible
from oomdoctor.report.md_safe import WORD_JOINER, code, escape, fence, fence_lines
from oomdoctor.report.render import render
from tests.conftest import FIXTURES, REPO

GOLDEN = Path(__file__).parent / "golden"
PRESSURE = FIXTURES / "sglang-0.5.10" / "deepseek-v2-lite-kv-pressure.log"
Y085 = FIXTURES / "sglang-0.5.2" / "worked-example-y085.log"
CONTAINER = FIXTURES / "sglang-0.5.2" / "runtime-oom-container-snapshot.log"
CONTAINER_SNAPSHOT = FIXTURES / "snapshots" / "container-self.json"
LLAMA = FIXTURES / "configs" / "meta-llama--Llama-3.1-8B-Instruct" / "config.json"

#: Terminal attacks: an OSC 8 hyperlink, a clear-screen, a carriage-return overwrite, a C1 CSI,
#: a right-to-left override.
TERMINAL = "\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\ \x1b[2J\rforged \x9b31m \u202egnp.exe"
#: Markdown attacks, on one line (a log line has no newline).
MARKDOWN = (
    "</details><script>alert(1)</script><img src=x onerror=alert(1)> <b>bold</b> "
    "[click](http://evil.example/c) ![x](http://e.example/i.png) <https://auto.example/a> "
    "https://evil.example/x www.evil.example evil.com/path victim@mail.example "
    "@octocat #123 org/repo#45 ``` ~~~ ```` ~~~~ | cell | $x$ *em* _u_ &amp; &#60;"
)
HOSTILE = f"{TERMINAL} {MARKDOWN}"  # the text report cuts evidence to a row: attacks first
#: A directory name (at most 255 bytes, no "/") with a bit of everything, a newline included.
HOSTILE_DIR = "<img src=x onerror=alert(1)> @octocat #123 www.evil.example ```\n~~~ \x1b[2J\r"
#: A value that closes a three-backtick fence, opens live HTML and adds a diff line.
BREAKOUT = "1.0\n```\n<img src=x onerror=alert(1)>\n+ --evil-flag 1"

#: The elements our Markdown makes: none of them can come from the log.
OWN_TAGS = frozenset(
    {"p", "pre", "code", "table", "thead", "tbody", "tr", "th", "td", "ul", "ol", "li"}
    | {"h2", "h3", "strong", "em", "hr", "br"}
)


# --------------------------------------------------------------------------- rendering helpers


class _Html(HTMLParser):
    """The tags of rendered HTML and its text outside <code> and <pre> (where GitHub neither
    pings nor links)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.prose: list[str] = []
        self._code = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._code += tag in ("code", "pre")

    def handle_endtag(self, tag: str) -> None:
        self._code -= tag in ("code", "pre")

    def handle_data(self, data: str) -> None:
        if not self._code:
            self.prose.append(data)

    def handle_comment(self, data: str) -> None:
        self.tags.append(("!--", {"text": data}))


def _markdown_it(md: str) -> str:
    from importlib.util import find_spec

    from markdown_it import MarkdownIt

    if find_spec("linkify_it") is None:  # gfm-like links bare URLs through linkify-it-py
        return str(MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md))
    return str(MarkdownIt("gfm-like").render(md))


def _cmark_gfm(md: str) -> str:
    cmarkgfm = pytest.importorskip("cmarkgfm")
    from cmarkgfm.cmark import Options

    # GitHub's own flags; UNSAFE lets raw HTML through, so any that is there shows up here
    return str(cmarkgfm.github_flavored_markdown_to_html(md, options=Options.CMARK_OPT_UNSAFE))


RENDERERS: dict[str, Callable[[str], str]] = {"markdown-it": _markdown_it, "cmark-gfm": _cmark_gfm}


def assert_inert(md: str, renderer: str, own_images: tuple[str, ...] = ()) -> _Html:
    """No element, link, mention or reference in the rendered ``md`` that the log supplied."""
    html = _Html()
    html.feed(RENDERERS[renderer](md))
    foreign = [
        (tag, attrs)
        for tag, attrs in html.tags
        if tag not in OWN_TAGS and not (tag == "img" and attrs.get("src") in own_images)
    ]
    assert not foreign, foreign  # <a>, <img>, <script>, <details>, <b>, raw-HTML comments...
    prose = "".join(html.prose)
    assert "@octocat" not in prose and "victim@mail" not in prose  # would ping / mailto
    assert not re.search(r"#\d", prose), "an issue reference GitHub would link"
    assert "\x1b" not in prose
    return html


# --------------------------------------------------------------------------- hostile inputs


def _plant(log: Path, out: Path, server_args: dict[str, str], markers: tuple[str, ...]) -> Path:
    """``log`` with server_args values replaced (as Python reprs, the way SGLang prints them)
    and, in every line holding one of ``markers``, terminal attacks after the timestamp (where
    the text report, which cuts a line to a row, still shows them) and all attacks at the end.
    (A log's CR ends a line when it is read: the reader, not the reporter, takes that one.)"""
    text = log.read_text("utf-8")
    for key, value in server_args.items():
        planted = f"{key}={value!r}".replace("\\", "\\\\")  # a replacement template
        text, n = re.subn(rf"\b{key}=('[^']*'|[^,)]*)", planted, text, count=1)
        assert n == 1, key
    rows = text.split("\n")
    head = TERMINAL.replace("\r", "")
    for i, row in enumerate(rows):
        if any(m in row for m in markers):
            stamp, _, rest = row.partition("] ")
            rows[i] = f"{stamp}] {head} {rest} {HOSTILE}"
    out.write_text("\n".join(rows), "utf-8")
    return out


@pytest.fixture(scope="module")
def hostile_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The KV-pressure log, whose advice quotes server_args values in its launch-flag diff,
    with a fence breakout in one such value, hostile text in the model path and in the lines
    the rules quote as evidence, and a string where a number belongs."""
    return _plant(
        PRESSURE,
        tmp_path_factory.mktemp("hostile") / "server.log",
        {
            "schedule_conservativeness": BREAKOUT,
            "model_path": f"\n```\n<img src=x onerror=alert(1)> {HOSTILE}",
            "chunked_prefill_size": "<script>alert(1)</script>",
        },
        ("Decode batch", "KV cache pool is full"),
    )


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code != 70 and "Traceback" not in result.stderr, result.stderr
    return result.exit_code, result.stdout, result.stderr


def _every_string(value: Any, tail: str, skip: frozenset[str] = frozenset()) -> Any:
    """A copy of a report dict with ``tail`` appended to every string, dict keys aside."""
    if isinstance(value, str):
        return value + tail
    if isinstance(value, dict):
        return {k: v if k in skip else _every_string(v, tail, skip) for k, v in value.items()}
    if isinstance(value, list):
        return [_every_string(v, tail, skip) for v in value]
    return value


def _hostile_reports() -> Iterator[dict[str, Any]]:
    for name in ("startup", "cotenant"):
        report = json.loads((GOLDEN / f"{name}.json").read_text("utf-8"))
        # picture part keys pick the bar's characters; the rest is free text as far as a
        # reporter knows
        yield _every_string(report, f" {HOSTILE}", skip=frozenset({"picture"}))
        broken = copy.deepcopy(report)
        for a in broken["actions"]:
            if a.get("flag"):
                a["current"] = BREAKOUT
                a["value"] = BREAKOUT
        for f in broken["findings"]:
            for e in f["evidence"]:
                e["text"] = BREAKOUT
        yield broken


# --------------------------------------------------------------------------- Markdown


@pytest.mark.parametrize("renderer", sorted(RENDERERS))
def test_every_report_string_is_inert_in_markdown(renderer: str) -> None:
    for report in _hostile_reports():
        md = render(report, "markdown")
        assert_inert(md, renderer, own_images=("card.svg",))  # the golden's picture
        assert "\x1b" not in md and "\r" not in md and "\u202e" not in md


@pytest.mark.parametrize("renderer", sorted(RENDERERS))
def test_diagnose_markdown_of_a_hostile_log_is_inert(renderer: str, hostile_log: Path) -> None:
    code_, md, err = _invoke("diagnose", str(hostile_log), "--format", "markdown", "--no-gpu")
    assert code_ in (0, 1) and not err, err
    assert_inert(md, renderer)
    assert "\x1b" not in md
    # the evidence was shown, inside its fence, as visible text (the reader ends a line at
    # its trailing carriage return, so the planted tail after it is a line of its own)
    assert any("␛]8;;http://evil" in d for d in _code_text(md)), md


def _code_text(md: str) -> list[str]:
    from markdown_it import MarkdownIt

    return [t.content for t in MarkdownIt("commonmark").parse(md) if t.type == "fence"]


def test_a_server_args_value_cannot_break_out_of_the_diff(hostile_log: Path) -> None:
    """A logged server_args value that is not a number is never quoted into the diff (the
    advice takes a flag's current value only as a number); whatever is quoted stays on its own
    diff line, inside the fence, and adds no `+` line (tests/test_reporters.py checks a string
    value's line by itself)."""
    from markdown_it import MarkdownIt

    _, md, _ = _invoke("diagnose", str(hostile_log), "--format", "markdown", "--no-gpu")
    tokens = MarkdownIt("commonmark").parse(md)
    diffs = [t for t in tokens if t.type == "fence" and t.info == "diff"]
    # the diff is fix 1's alone (issue 21), and fix 1 of this log is text (how often the pool
    # ran full): the fix that quotes the hostile value is a numbered action, not a diff line
    assert diffs == []
    assert "set `--schedule-conservativeness 1.3`" in md
    assert not re.search(r"^\+ --evil-flag", md, re.MULTILINE)
    assert not [t for t in tokens if t.type in ("html_block", "html_inline")]


@pytest.mark.parametrize("renderer", sorted(RENDERERS))
def test_plan_markdown_with_a_hostile_model_path_is_inert(renderer: str, tmp_path: Path) -> None:
    # a directory name may hold anything but "/" and NUL
    model = tmp_path / HOSTILE_DIR
    model.mkdir()
    (model / "config.json").write_text(LLAMA.read_text("utf-8"), "utf-8")
    code_, md, err = _invoke("plan", "--gpu", "H100", "--model", str(model), "--format", "markdown")
    assert code_ in (0, 1), err
    assert_inert(md, renderer)
    assert "\x1b" not in md
    for fenced in _code_text(md):  # the launch command stays one line, whatever the path holds
        if fenced.startswith("python -m sglang"):
            assert fenced.count("\n") == 1


@pytest.mark.parametrize("renderer", sorted(RENDERERS))
def test_process_names_from_a_snapshot_are_inert_in_markdown(renderer: str, tmp_path: Path) -> None:
    snap = _hostile_snapshot(tmp_path, f"{MARKDOWN} {TERMINAL}")
    _, md, err = _invoke(
        "diagnose", str(CONTAINER), "--snapshot", str(snap), "--format", "markdown"
    )
    assert "### GPU holders" in md, err
    assert_inert(md, renderer)
    assert "\x1b" not in md


def test_the_report_makes_no_link_of_its_own() -> None:
    """Why assert_inert may refuse every <a>: the template writes no link, only the optional
    picture of the card (an image, by the path the user gave --svg)."""
    template = (REPO / "oomdoctor" / "report" / "templates" / "report.md.j2").read_text("utf-8")
    assert re.findall(r"!?\[[^\]]*\]\(", template) == ["![the card before and after]("]


def test_every_template_value_goes_through_a_filter() -> None:
    """Every `{{ ... }}` of the Markdown template ends in esc, code, fence or fence_lines, or in
    a filter that prints only numbers (gib, num, "%.0f" | format) or a percent-encoded path."""
    template = (REPO / "oomdoctor" / "report" / "templates" / "report.md.j2").read_text("utf-8")
    safe = ("esc", "prose", "code", "fence", "fence_lines", "gib", "num", "urlpath", "format")
    ours = ("loop.index", "label")  # a counter, and a label from the template's own tuple
    for expr in re.findall(r"{{(.*?)}}", template):
        if expr.strip() in ours:
            continue
        last = expr.rsplit("|", 1)[-1].strip().split("(")[0].split(" ")[0]
        assert "|" in expr and last in safe, expr


def test_svg_path_cannot_leave_its_image_link(tmp_path: Path) -> None:
    out = tmp_path / "card).svg"
    _invoke("diagnose", str(Y085), "--no-gpu", "--format", "markdown", "--svg", str(out))
    md = _invoke("diagnose", str(Y085), "--no-gpu", "--format", "markdown", "--svg", str(out))[1]
    assert "card%29.svg)" in md


# --------------------------------------------------------------------------- md_safe units


@pytest.mark.parametrize(
    "text", ["```", "~~~", "a\n````\nb", "~~~~~~ x", "`` ` ```` `", "\n```\n<img src=x>\n```"]
)
def test_fence_outlasts_every_backtick_and_tilde_run(text: str) -> None:
    from markdown_it import MarkdownIt

    block = fence(text, "diff")
    tokens = MarkdownIt("commonmark").parse(block)
    assert [t.type for t in tokens] == ["fence"] and tokens[0].content == text + "\n"
    longest = max(len(r) for r in re.findall(r"`+|~+", text))
    assert block.startswith("`" * (longest + 1))


def test_fence_info_string_is_ours_and_safe() -> None:
    assert fence("x", "di`ff\n<b>").splitlines()[0] == "```diffb"


def test_fence_lines_keeps_one_item_on_one_line() -> None:
    from markdown_it import MarkdownIt

    block = fence_lines(["- --a 1", "+ --a 2\n+ --evil 3\r", "\x1b[2J"], "diff")
    content = MarkdownIt("commonmark").parse(block)[0].content
    assert content.splitlines() == ["- --a 1", "+ --a 2␊+ --evil 3␍", "␛[2J"]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("@octocat hi", f"@{WORD_JOINER}octocat hi"),
        ("see #123", f"see \\#{WORD_JOINER}123"),
        ("org/repo#45", f"org/repo\\#{WORD_JOINER}45"),
        ("https://evil.example/x", "https\\://evil\\.example/x"),
        ("www.evil.example", "www\\.evil\\.example"),
        ("a@b.com", f"a@{WORD_JOINER}b\\.com"),
        ("mailto:a@b.com", f"mailto\\:a@{WORD_JOINER}b\\.com"),
        ("0.828 GiB", "0.828 GiB"),  # "0." then a digit starts no list: no escape to read past
        ("1. x", "1\\. x"),  # a list marker and a space would: escaped
        ("- x", "\\- x"),
        ("-5.40 GiB", "-5.40 GiB"),
        ("y_min and startup_kv_alloc", "y_min and startup_kv_alloc"),  # intraword: no emphasis
        ("_u_", "\\_u\\_"),
        ("y 0.828 and 1.5 × 8192", "y 0.828 and 1.5 × 8192"),  # numbers keep their dots
    ],
)
def test_escape_neutralises_mentions_references_and_links(text: str, shown: str) -> None:
    assert escape(text) == shown


@pytest.mark.parametrize("renderer", sorted(RENDERERS))
def test_escaped_text_renders_as_itself(renderer: str) -> None:
    """The escapes are invisible: the rendered text reads as the log did (the word joiners
    aside, which show as nothing)."""
    html = _Html()
    html.feed(RENDERERS[renderer](escape(MARKDOWN)))
    assert [t for t, _ in html.tags] == ["p"]
    assert "".join(html.prose).replace(WORD_JOINER, "").strip() == MARKDOWN


def test_code_span_is_one_line_and_visible() -> None:
    assert code("a\nb\x1b[2J") == "`a b␛[2J`"


# --------------------------------------------------------------------------- terminal


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[2J", "␛[2J"),
        ("a\rb", "a␍b"),
        ("\x00\x07\x08\x7f", "␀␇␈␡"),
        ("\x9b31m", "\\x9b31m"),
        ("\u202eabc\u2066", "\\u202eabc\\u2066"),
        ("tab\tand\nnewline", "tab\tand\nnewline"),
        ("already ␛ shown", "already ␛ shown"),
    ],
)
def test_visible_replaces_controls(raw: str, shown: str) -> None:
    assert visible(raw) == shown
    assert visible(visible(raw)) == visible(raw)
    assert "\n" not in one_line(raw)


def _only_rich_colour(out: str) -> None:
    """Colour mode: every ESC starts an SGR sequence (``ESC [ ... m``) that rich wrote."""
    assert "\x1b" in out  # colour is on
    leftover = re.sub(r"\x1b\[[0-9;]*m", "", out)
    assert "\x1b" not in leftover and "\r" not in leftover and "\x9b" not in leftover
    assert "\u202e" not in leftover


@pytest.mark.parametrize("color", ["never", "always"])
def test_diagnose_text_lets_no_escape_through(color: str, hostile_log: Path) -> None:
    code_, out, err = _invoke("diagnose", str(hostile_log), "--no-gpu", "--color", color)
    assert code_ in (0, 1) and not err, err
    assert "␛]8;;http://evil␛\\click" in out  # shown, not obeyed
    if color == "never":
        assert "\x1b" not in out and "\r" not in out and "\u202e" not in out
    else:
        _only_rich_colour(out)


@pytest.mark.parametrize("color", ["never", "always"])
def test_every_report_string_is_visible_in_text(color: str) -> None:
    for report in _hostile_reports():
        out = render(report, "text", color=color == "always")
        if color == "never":
            assert "\x1b" not in out and "\r" not in out and "\x9b" not in out
        else:
            _only_rich_colour(out)
        assert "+ --evil-flag" not in out.replace("␊+ --evil-flag", "")  # no forged diff line


@pytest.mark.parametrize("color", ["never", "always"])
def test_plan_text_lets_no_escape_through(color: str, tmp_path: Path) -> None:
    model = tmp_path / HOSTILE_DIR
    model.mkdir()
    (model / "config.json").write_text(LLAMA.read_text("utf-8"), "utf-8")
    code_, out, err = _invoke("plan", "--gpu", "H100", "--model", str(model), "--color", color)
    assert code_ in (0, 1), err
    assert "␛[2J" in out
    if color == "never":
        assert "\x1b" not in out and "\r" not in out
    else:
        _only_rich_colour(out)


def _hostile_snapshot(tmp_path: Path, name: str) -> Path:
    """The container fixture's snapshot, its one process now visible and named ``name``
    (any user can set a process's comm)."""
    snap = json.loads(CONTAINER_SNAPSHOT.read_text("utf-8"))
    snap["processes"][0].update(name=name, cmdline=f"{name} --model {name}", visible=True)
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(snap), "utf-8")
    return path


@pytest.mark.parametrize("color", ["never", "always"])
def test_process_name_from_a_snapshot_lets_no_escape_through(color: str, tmp_path: Path) -> None:
    snap = _hostile_snapshot(tmp_path, TERMINAL)
    _, out, err = _invoke("diagnose", str(CONTAINER), "--snapshot", str(snap), "--color", color)
    assert "GPU holders" in out, err
    assert "␛[2J" in out
    if color == "never":
        assert "\x1b" not in out and "\r" not in out
    else:
        _only_rich_colour(out)


# --------------------------------------------------------------------------- the picture


def _segments(**gib: float | None) -> dict[str, Any]:
    return {
        "y": 0.85,
        "capacity_gib": gib.pop("capacity", 80.0),
        "parts": [{"key": k, "label": k, "gib": v} for k, v in gib.items()],
        "kv_shortfall_gib": None,
    }


@pytest.mark.parametrize(
    "seg",
    [
        _segments(weights=1e9, kv=5e9, free=1.0),
        _segments(weights=1e308, kv=1e308, dynamic=1e308),  # their sum is infinite
        _segments(weights=-5.0, kv=math.nan, dynamic=math.inf, free=10.0),
        _segments(capacity=0.0, weights=10.0, kv=10.0),
        _segments(capacity=-1.0, weights=math.nan),
        _segments(capacity=math.nan, weights=1e9),
        _segments(capacity=1e-300, weights=1e300),
    ],
)
def test_bar_is_bounded_whatever_the_numbers(seg: dict[str, Any]) -> None:
    import xml.etree.ElementTree as ET

    bar = picture.text_bar(seg, width=64).splitlines()[0]
    assert len(bar) == len("y=0.85 [") + 64 + 1
    root = ET.fromstring(picture.svg([("now", seg)], width=720))
    rects = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("height") == "20"]
    widths = [float(r.get("width", "")) for r in rects]
    assert all(math.isfinite(w) and w > 0 for w in widths)
    assert sum(widths) <= 700 + 0.5  # the bar, 720 less its margins
    chart = picture.mermaid(seg, "t")
    assert chart is None or ("nan" not in chart and "inf" not in chart and " -" not in chart)


def _huge_log(tmp_path: Path, gb: str) -> Path:
    text = Y085.read_text("utf-8")
    text, n = re.subn(
        r"Load weight begin\. avail mem=[0-9.]+ GB", f"Load weight begin. avail mem={gb} GB", text
    )
    assert n == 1
    log = tmp_path / "huge.log"
    log.write_text(text, "utf-8")
    return log


@pytest.mark.parametrize("gb", ["1000000000.00", "5000000000.00"])
@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_a_logged_exabyte_draws_a_small_picture(tmp_path: Path, gb: str, fmt: str) -> None:
    """Issue 14: 10⁹ GB made the picture allocate 1.6 GB. Measured in a child process, whose
    peak RSS is its own."""
    log = _huge_log(tmp_path, gb)
    probe = (
        "import resource, sys\n"
        "from oomdoctor.cli import main\n"
        f"sys.argv = ['oomdoctor', 'diagnose', {str(log)!r}, '--no-gpu', '--format', {fmt!r},"
        f" '--svg', {str(tmp_path / 'card.svg')!r}]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
        # VmHWM is this program's own peak (a new one at exec); ru_maxrss on Linux also counts
        # the parent's pages at fork time, which is pytest's whole heap late in a full run
        "try:\n"
        "    rss = next(int(line.split()[1]) for line in open('/proc/self/status')\n"
        "               if line.startswith('VmHWM:'))\n"
        "except (OSError, StopIteration):\n"
        "    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"  # KiB on Linux
        "sys.stderr.write(f'\\nrss={rss} code={code}\\n')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    found = re.search(r"rss=(\d+) code=(\S+)", proc.stderr)
    assert found, proc.stderr
    rss_kib, code_ = int(found[1]), found[2]
    assert code_ in ("0", "1"), proc.stderr
    assert rss_kib < 200 * 1024, f"peak RSS {rss_kib / 1024:.0f} MiB"
    assert "Traceback" not in proc.stderr
    bars = [line for line in proc.stdout.splitlines() if "y=0.85 [" in line]
    assert bars and all(len(line) < 120 for line in bars)
