"""The shortcuts of the per-line path (issue 22 §3) answer what the long way answers.

- read/rests.py tests the text after a `(Name pid=N) ` prefix once: the answer is the whole
  line's, including for an anchor that runs across the prefix's end;
- normalise's memo of logger envelopes, and its first-character gates on the outer prefixes,
  give the envelope the plain call gives, on every line of every real log;
- a record head found inside a line (incident/feed.py) starts where the look-behind form does;
- the engine detector's cache of process names ignores digits only where no actor regex has one.

Lines are the real logs' (read in place) and the references' formats
(../shared/reference/vllm-logs.md, sglang-logs.md).
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from oomdoctor.extract.normalise import normalise
from oomdoctor.incident.detect import Detector
from oomdoctor.incident.feed import _inside
from oomdoctor.knowledge import EngineMarker, builtin
from oomdoctor.read import rests
from oomdoctor.read.rests import RestMemo
from oomdoctor.read.trie import alternation

REPO = Path(__file__).resolve().parents[1]
#: the real logs, and the fixtures written in the references' formats
LOGS = (REPO.parent / "shared" / "real-logs", REPO / "fixtures")
ANCHORS = (
    *(b"Dead stage process(es) detected", b"out of memory", b"GiB", b"Worker", b" bytes"),
    *(b"exit code 137", b"V1 LLM", b" blocks: 0,"),  # anchors with digits
)
PREFIXES = ("(VllmWorker rank=3 pid=1003) ", "(Dead stage process(es) ", "(EngineCore_0 pid=9) ")
TEXTS = (
    "INFO 05-01 10:00:05 [gpu_model_runner.py:1329] Model loading took 14.25 GiB",
    "detected: stage 2",
    "INFO 05-01 10:00:00 [gpu_worker.py:96] Starting to load model",
    "ERROR 05-01 10:05:00 [core.py:1] CUDA out of memory.",
    "WARNING 05-01 10:00:00 [x.py:1] freed 12 bytes",
    "plain text with no anchor",
    "ERROR 05-01 10:05:00 [proc.py:9] worker died with exit code 137",
    "ERROR 05-01 10:05:00 [proc.py:9] worker died with exit code 138",
    "INFO 05-01 10:00:00 [kv.py:3] # GPU blocks: 0, # CPU blocks: 512",
    "INFO 05-01 10:00:00 [kv.py:3] # GPU blocks: 10, # CPU blocks: 512",
    "INFO 05-01 10:00:00 [llm.py:3] Initializing a V1 LLM engine",
    "INFO 05-01 10:00:00 [llm.py:3] Initializing a V2 LLM engine",
)


def _real_lines() -> list[str]:
    lines: list[str] = []
    for path in sorted(p for folder in LOGS for p in folder.rglob("*.log")):
        lines += path.read_bytes().decode("utf-8", "replace").splitlines()
    return lines


@pytest.mark.parametrize("memo_size", [8, 4096])
def test_the_text_memo_answers_as_the_whole_line(
    memo_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random prefixed lines, texts repeating and not, the memo filling, clearing, stopping."""
    monkeypatch.setattr(rests, "REST_MEMO", memo_size)
    monkeypatch.setattr(rests, "WARM_UP", 10)
    regex = re.compile(alternation(ANCHORS))
    memo = RestMemo(ANCHORS)
    rng = random.Random(22)
    for i in range(3000):
        text = rng.choice(TEXTS) if rng.random() < 0.7 else f"{rng.choice(TEXTS)} #{i}"
        text = text.replace("10:0", f"1{rng.randrange(10)}:{rng.randrange(6)}")  # times vary
        line = (rng.choice(PREFIXES) + text).encode()
        assert bool(memo.anchored(line, regex.search)) == bool(regex.search(line)), line


def test_an_anchor_across_the_prefix_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rests, "WARM_UP", 1)
    regex = re.compile(alternation(ANCHORS))
    memo = RestMemo(ANCHORS)
    line = b"(Dead stage process(es) detected: stage 2"  # the prefix's `) ` is in the anchor
    for _ in range(3):  # the second and third answers come from the memo
        assert memo.anchored(line, regex.search)


def test_the_envelope_memo_and_gates_change_nothing() -> None:
    lines = _real_lines()
    assert len(lines) > 5000
    memo: dict = {}
    for _ in range(2):  # the second pass answers from the memo
        for line in lines:
            assert normalise(line, None, memo) == normalise(line), line


@pytest.mark.parametrize(
    ("head", "text"),
    [
        (
            r"^\(VllmWorker +rank=\d+ +pid=\d+\)(?: |$)",
            "x(VllmWorker rank=1 pid=2) a] (VllmWorker rank=3 pid=4)",
        ),
        (
            r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\]",
            "50%|##|[2026-03-02 09:41:07] a[2026-03-02 09:41:08] b",
        ),
        (r"^INFO \d\d-\d\d", "xINFO 05-01 .INFO 05-02 INFO 05-03"),
        (r"^I+NFO", "IINFO xIINFO .INFO"),
        (r"^(?:W|E)\d{4}", "aW1223 .E1223"),
    ],
)
def test_a_head_inside_a_line_starts_where_the_look_behind_says(head: str, text: str) -> None:
    plain = re.compile(r"(?<!\w)" + head[1:])
    assert [m.span() for m in _inside(head).finditer(text, 1)] == [
        m.span() for m in plain.finditer(text, 1)
    ]


def _detector(extra: tuple[EngineMarker, ...]) -> Detector:
    knowledge = builtin()
    return Detector(knowledge._replace(markers=(*knowledge.markers, *extra)))


def test_the_process_name_cache_ignores_digits_only_where_no_regex_has_one() -> None:
    shipped = _detector(())
    assert shipped._digit_blind
    a = shipped._actor_markers("VllmWorker rank=12")
    assert a and shipped._actor_markers("VllmWorker rank=99") == a
    assert len(shipped._actor_cache) == 1  # one entry for every rank's name
    seven = EngineMarker("vllm", "actor", r"^Worker_7$", regex=re.compile(r"^Worker_7$"))
    picky = _detector((seven,))
    assert not picky._digit_blind
    assert seven in picky._actor_markers("Worker_7")
    assert seven not in picky._actor_markers("Worker_8")
