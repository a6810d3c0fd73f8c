"""Each way a wrapper is taken off (extract/plan.py, extract/unwrap.py), on logs written from the
references' templates (`../shared/reference/sglang-logs.md` §1, §2, §5.5-5.6; `vllm-logs.md`;
`pytorch-oom.md` §5.1), inside the wrappers' own formats, with their confusers: a plain log with
long lines is not joined, a traceback's indented lines are not taken for a wrap's continuation, a
log whose clock goes back once is not reversed.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, cast

import pytest

from oomdoctor import pipeline
from oomdoctor.extract import unwrap
from oomdoctor.extract.plan import Plan, detect
from oomdoctor.model import Incident
from oomdoctor.read.backwards import count_lines, lines_backwards
from oomdoctor.read.sources import ReadStats, iter_blocks
from oomdoctor.rules.schema import Rule

# -- an SGLang 0.5.10 run that dies of a runtime OOM, written from the templates -------------
ARGS = (
    "server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', tokenizer_path="
    "'Qwen/Qwen2.5-7B-Instruct', tokenizer_mode='auto', dtype='auto', kv_cache_dtype='auto', "
    "mem_fraction_static=0.88, max_running_requests=None, chunked_prefill_size=8192, "
    "max_prefill_tokens=16384, tp_size=1, pp_size=1, dp_size=1, cuda_graph_max_bs=None, "
    "disable_cuda_graph=False, enable_dp_attention=False, page_size=1)"
)
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.31 GiB. GPU 0 has a total "
    "capacity of 79.19 GiB of which 1.05 GiB is free. Including non-PyTorch memory, this process "
    "has 78.13 GiB memory in use. Of the allocated memory 74.20 GiB is allocated by PyTorch, and "
    "1.92 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
    "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html"
    "#environment-variables)"
)
FRAMES = [
    '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 2311,'
    " in run_scheduler_process",
    "    scheduler.event_loop_overlap()",
    '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_executor/model_runner.py", '
    "line 1701, in forward_extend",
    "    return self.model.forward(",
    "           ^^^^^^^^^^^^^^^^^^^",
]
SGLANG = [
    f"[2026-03-02 09:41:{s:02d}] {text}"
    for s, text in enumerate(
        [
            ARGS,
            "Init torch distributed begin.",
            "Init torch distributed ends. elapsed=0.21 s, mem usage=0.09 GB",
            "Load weight begin. avail mem=78.41 GB",
            "Load weight end. elapsed=4.02 s, type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail "
            "mem=63.92 GB, mem usage=14.49 GB.",
            "KV Cache is allocated. #tokens: 1153264, K size: 30.80 GB, V size: 30.80 GB",
            "Memory pool end. avail mem=2.12 GB",
            "max_total_num_tokens=1153264, chunked_prefill_size=8192, max_prefill_tokens=16384, "
            "max_running_requests=4096, context_len=32768, available_gpu_mem=1.43 GB",
            "The server is fired up and ready to roll!",
            "Prefill batch. #new-seq: 3, #new-token: 8192, #cached-token: 0, token usage: 0.41, "
            "#running-req: 17, #queue-req: 4",
            "Scheduler hit an exception: Traceback (most recent call last):",
        ]
    )
]
SGLANG += [
    *FRAMES,
    OOM,
    "",
    "[2026-03-02 09:41:12] Received sigquit from a child process. It usually means the child failed.",
]
CATEGORY = "runtime_activation"


def _write(tmp_path: Path, lines: list[str], name: str = "x.log", end: str = "\n") -> Path:
    path = tmp_path / name
    path.write_bytes(("".join(ln + end for ln in lines)).encode("utf-8"))
    return path


@pytest.fixture(scope="module")
def read(rules: tuple[Rule, ...]) -> Callable[[Path], Incident]:
    return lambda path: pipeline.read([str(path)], rules)


@pytest.fixture(scope="module")
def category(rules: tuple[Rule, ...]) -> Callable[[Path], str]:
    return lambda path: pipeline.run([str(path)], rules).verdict.category


@pytest.fixture(scope="module")
def anchors(rules: tuple[Rule, ...]) -> tuple[str, ...]:
    return pipeline.extractor_for(rules).scanner.anchors


def _plan(lines: list[str], anchors: tuple[str, ...]) -> Plan:
    return detect(lines, anchors)


def _oom_line(incident: Incident) -> int:
    primary = incident.primary
    assert primary is not None
    return primary.line.number


def test_the_plain_log(
    tmp_path: Path, category: Callable[[Path], str], anchors: tuple[str, ...]
) -> None:
    plan = _plan(SGLANG, anchors)
    assert (plan.rewrites, plan.prefix) == (False, None)
    assert category(_write(tmp_path, SGLANG)) == CATEGORY


# -- 1. the learned prefix --------------------------------------------------------------------

PREFIXES: dict[str, Callable[[int], str]] = {
    "compose": lambda i: "sglang-1  | ",
    "journald": lambda i: f"Mar 02 09:41:{i % 60:02d} gpu-node-07 python3[4117]: ",
    "kubectl-prefix": lambda i: "[pod/llm-0-7d9f/server] ",
    "numbered": lambda i: f"{i + 98:>4} | ",
    "cat-n": lambda i: f"{i + 1:>6}\t",
    "loki": lambda i: f'2026-03-02T09:41:{i % 60:02d}.000Z\t{{app="llm", pod="llm-0"}}\t',
    "syslog": lambda i: f"<14>1 2026-03-02T09:41:{i % 60:02d}.000Z gpu-node-07 sglang 4117 - - ",
    "quote": lambda i: "> ",
    "service-pipe": lambda i: f"2026-03-02 09:41:{i % 60:02d}.{i:03d} | llm-api-7 | ",
}


@pytest.mark.parametrize("name", sorted(PREFIXES))
def test_a_learned_prefix_is_stripped_before_the_envelopes(
    name: str,
    tmp_path: Path,
    category: Callable[[Path], str],
    read: Callable[[Path], Incident],
    anchors: tuple[str, ...],
) -> None:
    lines = [PREFIXES[name](i) + ln for i, ln in enumerate(SGLANG)]
    plan = _plan(lines, anchors)
    assert plan.prefix is not None, name
    assert not plan.rewrites  # the extractor strips it from each line: no rewriting
    path = _write(tmp_path, lines)
    assert category(path) == CATEGORY
    incident = read(path)
    assert incident.server_args.get("mem_fraction_static") == 0.88
    assert incident.ready is not None and incident.ready.ts == "2026-03-02 09:41:08"  # SGLang's
    assert _oom_line(incident) == SGLANG.index(OOM) + 1


def test_a_known_envelope_is_parsed_not_stripped(anchors: tuple[str, ...]) -> None:
    """A prefix every line shares that is a logger's own envelope is left to its parser (it
    tells the rank and the time): SGLang's `[ts TP0] `, vLLM's `LEVEL mm-dd hh:mm:ss [f.py:N] `."""
    sglang = [f"[2026-03-02 09:41:{i:02d} TP0] Decode batch. #running-req: {i}" for i in range(9)]
    vllm = [f"INFO 03-02 09:41:{i:02d} [gpu_worker.py:{i + 90}] step {i}" for i in range(9)]
    assert _plan(sglang, anchors).prefix is None
    assert _plan(vllm, anchors).prefix is None
    kube = [f"2026-03-02T09:41:{i:02d}.12Z {ln}" for i, ln in enumerate(sglang)]
    learned = _plan(kube, anchors).prefix
    assert learned is not None and learned.shape == "9-9-9a9:9:9.9a "  # the timestamp alone


def test_interleaved_rank_lines_keep_their_rank(
    tmp_path: Path, read: Callable[[Path], Incident]
) -> None:
    """mangle's `interleave`: some lines are another rank's copies, `[rank1]: `."""
    lines = []
    for ln in SGLANG:
        lines.append(ln)
        if "Load weight" in ln:
            lines.append("[rank1]: " + ln)
    ranks = {f.line.rank for f in read(_write(tmp_path, lines)).facts_of("load_begin")}
    assert ranks == {None, "TP1"}


def test_message_words_are_not_a_prefix(anchors: tuple[str, ...]) -> None:
    """Lines that all start alike because they say the same thing (stats lines with no
    envelope, a traceback's frames) have no prefix."""
    stats = [
        f"Decode batch. #running-req: {i}, #token: {i * 100}, token usage: 0.5" for i in range(20)
    ]
    assert _plan(stats, anchors).prefix is None
    frames = [ln for _ in range(5) for ln in FRAMES]
    assert _plan(frames, anchors).prefix is None


# -- 2. JSON lines ----------------------------------------------------------------------------


def _docker(lines: list[str]) -> list[str]:
    return [
        json.dumps(
            {"log": ln + "\n", "stream": "stderr", "time": f"2026-03-02T09:41:{i % 60:02d}.5Z"}
        )
        for i, ln in enumerate(lines)
    ]


def _gcp(lines: list[str]) -> list[str]:
    return [
        json.dumps(
            {
                "insertId": f"{i:08x}",
                "jsonPayload": {"message": ln, "logger": "sglang"},
                "resource": {"type": "k8s_container", "labels": {"pod_name": "llm-0"}},
                "timestamp": f"2026-03-02T09:41:{i % 60:02d}.5Z",
            }
        )
        for i, ln in enumerate(lines)
    ]


def _journal(lines: list[str]) -> list[str]:
    return [
        json.dumps(
            {
                "__CURSOR": f"s=4f2c;i={i:x};b=9a1e;m={i * 977:x};t={i * 31337:x};x={i * 7919:x}",
                "__REALTIME_TIMESTAMP": str(1772444467000000 + i),
                "_PID": "4117",
                "_HOSTNAME": "gpu-node-07",
                "MESSAGE": ln,
            }
        )
        for i, ln in enumerate(lines)
    ]


@pytest.mark.parametrize(
    ("wrap", "field"),
    [(_docker, ("log",)), (_gcp, ("jsonPayload", "message")), (_journal, ("MESSAGE",))],
)
def test_json_lines_are_read_from_the_field_that_holds_the_line(
    wrap: Callable[[list[str]], list[str]],
    field: tuple[str, ...],
    tmp_path: Path,
    category: Callable[[Path], str],
    read: Callable[[Path], Incident],
    anchors: tuple[str, ...],
) -> None:
    lines = wrap(SGLANG)
    plan = _plan(lines, anchors)
    assert plan.json is not None and plan.json.text == field  # not `__CURSOR`, not an id
    path = _write(tmp_path, lines)
    assert category(path) == CATEGORY
    incident = read(path)
    primary = incident.primary
    assert primary is not None and primary.frames, '`File \\"` frames were unescaped'
    assert _oom_line(incident) == SGLANG.index(OOM) + 1


def test_a_record_that_holds_a_whole_traceback_is_several_lines(
    tmp_path: Path, category: Callable[[Path], str], read: Callable[[Path], Incident]
) -> None:
    head = SGLANG[: SGLANG.index(FRAMES[0])]
    record = "\n".join([*FRAMES, OOM]) + "\n"
    lines = [*_docker(head), json.dumps({"log": record, "stream": "stderr"})]
    path = _write(tmp_path, lines)
    assert category(path) == CATEGORY
    incident = read(path)
    assert _oom_line(incident) == len(lines)  # the record's own line in the file
    assert incident.primary is not None and incident.primary.frames


# -- 3. split records -------------------------------------------------------------------------


def _cri(lines: list[str], size: int = 64) -> list[str]:
    out = []
    for i, ln in enumerate(lines):
        pieces = [ln[k : k + size] for k in range(0, len(ln), size)] or [""]
        for n, piece in enumerate(pieces):
            tag = "F" if n == len(pieces) - 1 else "P"
            out.append(f"2026-03-02T09:41:{i % 60:02d}.{n:09d}Z stderr {tag} {piece}")
    return out


def test_cri_partial_lines_are_joined(
    tmp_path: Path,
    category: Callable[[Path], str],
    read: Callable[[Path], Incident],
    anchors: tuple[str, ...],
) -> None:
    lines = _cri(SGLANG)
    assert _plan(lines, anchors).cri
    path = _write(tmp_path, lines)
    assert category(path) == CATEGORY
    incident = read(path)
    assert incident.server_args.get("mem_fraction_static") == 0.88
    first = next(i for i, ln in enumerate(lines) if "CUDA out of memory" in ln)
    assert _oom_line(incident) == first + 1  # the record's first physical line


def _softwrap(lines: list[str], width: int) -> list[str]:
    out = []
    for ln in lines:
        while len(ln) > width:
            out.append(ln[:width])
            ln = ln[width:]
        out.append(ln)
    return out


def _hardwrap(lines: list[str], width: int, indent: str) -> list[str]:
    out = []
    for ln in lines:
        first = True
        while len(ln) > width:
            cut = ln.rfind(" ", 1, width + 1)
            if cut <= 0 or not ln[:cut].strip():
                cut = ln.find(" ", width)
                if cut < 0:
                    break
            out.append(("" if first else indent) + ln[:cut].rstrip())
            ln, first = ln[cut:].lstrip(" "), False
        out.append(("" if first else indent) + ln)
    return out


@pytest.mark.parametrize("width", [80, 100, 132])
def test_a_soft_wrap_is_joined(
    width: int,
    tmp_path: Path,
    category: Callable[[Path], str],
    read: Callable[[Path], Incident],
    anchors: tuple[str, ...],
) -> None:
    lines = _softwrap(SGLANG, width)
    plan = _plan(lines, anchors)
    assert [(w.width, w.soft) for w in plan.wraps] == [(width, True)]
    path = _write(tmp_path, lines)
    assert category(path) == CATEGORY
    incident = read(path)
    assert incident.server_args.get("chunked_prefill_size") == 8192  # the dump, re-joined
    assert incident.primary is not None and incident.primary.oom is not None
    assert incident.primary.oom.free_gib == pytest.approx(1.05)
    assert _oom_line(incident) == lines.index(OOM[:width]) + 1


@pytest.mark.parametrize(("width", "indent"), [(72, ""), (76, "    "), (90, "  ")])
def test_a_hard_wrap_is_joined(
    width: int,
    indent: str,
    tmp_path: Path,
    category: Callable[[Path], str],
    read: Callable[[Path], Incident],
    anchors: tuple[str, ...],
) -> None:
    lines = _hardwrap(SGLANG, width, indent)
    plan = _plan(lines, anchors)
    assert [(w.soft, w.indent) for w in plan.wraps] == [(False, len(indent))]
    path = _write(tmp_path, lines)
    assert category(path) == CATEGORY
    incident = read(path)
    assert incident.server_args.get("max_prefill_tokens") == 16384
    assert incident.primary is not None and len(incident.primary.frames) == 2
    assert _oom_line(incident) == next(i for i, ln in enumerate(lines) if "torch.Out" in ln) + 1


def test_an_envelope_cut_off_behind_an_outer_prefix_is_bare() -> None:
    """A hard wrap of a compose log can leave a line that is the service's prefix and vLLM's
    envelope alone (the caret line that followed went to the next line): that line's message
    was cut off, so what follows continues it, though the outer prefix is not learned yet."""
    from oomdoctor.extract.wrapping import bare_envelope

    envelope = "(EngineCore_0 pid=88) ERROR 11-02 07:41:19 [core.py:712]"
    assert bare_envelope(envelope)
    assert bare_envelope(f"api-server-1  | {envelope}")
    assert not bare_envelope(f'api-server-1  | {envelope}   File "/x/y.py", line 3, in f')
    assert not bare_envelope("api-server-1  | the model is loaded [core.py:712] ok")


def test_a_plain_log_with_long_lines_is_not_joined(anchors: tuple[str, ...]) -> None:
    """Stats lines of one template share the longest length, records follow them: no wrap."""
    stats = [
        f"[2026-03-02 09:{m:02d}:00] Decode batch. #running-req: 17, #token: 4{m:02d}113, token "
        f"usage: 0.41, cuda graph: True, gen throughput (token/s): 1{m:02d}8.20, #queue-req: 4"
        for m in range(40)
    ]
    assert _plan(stats + SGLANG, anchors).wraps == ()
    assert _plan(SGLANG * 3, anchors).wraps == ()


def test_traceback_code_lines_are_not_continuations(anchors: tuple[str, ...]) -> None:
    """Frames whose code lines are indented like a wrap's continuation stay as they are."""
    frames = []
    for k in range(12):
        frames += [
            f'  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/layers/m{k}.py", line '
            f"{100 + k}, in forward",
            "    return self._call_impl(*args, **kwargs)",
        ]
    lines = ["Traceback (most recent call last):", *frames, OOM[len("torch.") :][:0] + OOM]
    assert _plan(lines, anchors).wraps == ()


# -- 4. newest first --------------------------------------------------------------------------


def _loki(lines: list[str]) -> list[str]:
    rows = [
        f'2026-03-02T09:{i // 60:02d}:{i % 60:02d}.000Z\t{{app="llm"}}\t{ln}'
        for i, ln in enumerate(lines)
    ]
    return rows[::-1]


def test_a_newest_first_file_is_read_backwards(
    tmp_path: Path, category: Callable[[Path], str], read: Callable[[Path], Incident]
) -> None:
    lines = _loki(SGLANG)
    path = _write(tmp_path, lines)
    assert category(path) == CATEGORY
    incident = read(path)
    assert incident.ready is not None and incident.server_args_line is not None
    assert incident.ready.seq > incident.server_args_line.seq  # read oldest first
    physical = next(i for i, ln in enumerate(lines) if OOM in ln) + 1
    assert _oom_line(incident) == physical  # the line in the file
    assert any("newest first" in n for n in incident.notices)


def test_a_newest_first_pipe_is_put_back_in_order(rules: tuple[Rule, ...]) -> None:
    data = "".join(ln + "\n" for ln in _loki(SGLANG)).encode()
    diagnosis = pipeline.run(["-"], rules, stdin=io.BytesIO(data))
    assert diagnosis.verdict.category == CATEGORY


def test_beyond_its_bound_a_pipe_keeps_its_order_and_says_so(
    monkeypatch: pytest.MonkeyPatch, rules: tuple[Rule, ...]
) -> None:
    monkeypatch.setattr(unwrap, "REVERSE_BOUND", 64)
    data = "".join(ln + "\n" for ln in _loki(SGLANG)).encode()
    incident = pipeline.read(["-"], rules, stdin=cast(BinaryIO, _Chunks(data, 200)))
    assert any("order could not be restored" in n for n in incident.notices)


class _Chunks(io.RawIOBase):
    """A pipe that hands its bytes over a few at a time (as blocks arrive from a process)."""

    def __init__(self, data: bytes, size: int) -> None:
        self._data, self._size = data, size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self._size, len(self._data))
        buffer[:n], self._data = self._data[:n], self._data[n:]
        return n


def test_a_clock_that_goes_back_once_is_not_reversed(anchors: tuple[str, ...]) -> None:
    """A restart or an NTP step: one step back among steps forward."""
    lines = list(SGLANG)
    lines[6] = lines[6].replace("09:41:06", "09:40:01")
    assert not _plan(lines, anchors).reverse
    restarted = SGLANG[:6] + [ln.replace("2026-03-02 09:41", "2026-03-02 09:30") for ln in SGLANG]
    assert not _plan(restarted, anchors).reverse


def test_a_gzipped_newest_first_export(tmp_path: Path, category: Callable[[Path], str]) -> None:
    """Not seekable once decompressed: held in memory (within the bound) and put in order."""
    path = tmp_path / "x.log.gz"
    path.write_bytes(gzip.compress("".join(ln + "\n" for ln in _loki(SGLANG)).encode()))
    assert category(path) == CATEGORY


def test_reading_backwards_in_small_blocks(tmp_path: Path) -> None:
    path = _write(tmp_path, [f"line {i} " + "x" * (i % 7) for i in range(50)])
    want = path.read_bytes().split(b"\n")[:-1][::-1]
    assert list(lines_backwards(path, block_size=16)) == want
    assert count_lines(path, block_size=16) == 50
    path.write_bytes(b"a\nb")  # no newline at the end
    assert list(lines_backwards(path, block_size=1)) == [b"b", b"a"]
    assert count_lines(path) == 2


# -- 5. records that lost their line break; line ends; byte-order marks ----------------------


def test_a_record_a_progress_bar_ran_into_is_split(
    tmp_path: Path, read: Callable[[Path], Incident]
) -> None:
    """tqdm without its `\\r`: the record head most lines start with marks where it begins."""
    head = "(EngineCore_DP0 pid=4117) ERROR 03-02 09:41:07 [core.py:720] "
    lines = [head + f"step {i}" for i in range(8)]
    lines.append(
        "Processed prompts:  6%|▋         | 29/512 [00:08<02:31,  3.19it/s]"
        + head
        + "ValueError: Free memory on device cuda:0 (7.10/79.19 GiB) on startup is less than "
        "desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or "
        "reduce GPU memory used by other processes."
    )
    incident = read(_write(tmp_path, lines))
    found = [f for f in incident.facts if "Free memory on device" in f.line.text]
    assert found and found[0].line.text.startswith("ValueError: Free memory")
    assert found[0].line.actor_pid == 4117


def test_crlf_and_a_byte_order_mark(tmp_path: Path, category: Callable[[Path], str]) -> None:
    path = tmp_path / "x.log"
    path.write_bytes(b"\xef\xbb\xbf" + "".join(ln + "\r\n" for ln in SGLANG).encode())
    assert category(path) == CATEGORY


def test_blocks_keep_whole_lines_and_their_numbers(
    tmp_path: Path, anchors: tuple[str, ...]
) -> None:
    """The rewritten stream: whole logical lines, each with its first physical line."""
    lines = _softwrap(SGLANG, 80)
    path = _write(tmp_path, lines)
    with path.open("rb") as fh:
        reader = unwrap.Unwrapper(iter_blocks(fh, ReadStats("x"), block_size=4096), anchors, path)
        blocks = list(reader)
    numbers = [n for b in blocks for n in (b.numbers or ())]
    texts = [t for b in blocks for t in b.data.decode().split("\n")[:-1]]
    assert all(b.data.endswith(b"\n") for b in blocks)
    assert texts == SGLANG
    assert numbers == sorted(numbers) and numbers[0] == 1
    assert reader.physical == len(lines)


def test_live_input_learns_the_prefix_from_its_first_lines(rules: tuple[Rule, ...]) -> None:
    """`watch`, `diagnose --follow` and a file's head are fed block by block, with no plan."""
    parser = pipeline.stream_parser(rules, "<stdin>", decode=False)
    for ln in SGLANG:
        parser.feed(("sglang-1  | " + ln + "\n").encode())
    parser.close()
    incident = parser.incident()
    assert incident.server_args.get("mem_fraction_static") == 0.88
    assert incident.primary is not None and incident.primary.frames
