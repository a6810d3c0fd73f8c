"""Wrappers users meet that ../shared/tools/mangle does not make, written the way each tool
writes them; the same contract as mangle's: every transform keeps each line's text.

Each transform is ``f(text, rnd) -> text`` like mangle's own. Formats:
- ``cri``: containerd / CRI-O files (`/var/log/pods/.../0.log`): `<RFC 3339 nanos> <stream>
  <P|F> <text>`; a line longer than the runtime's buffer is written as partial (`P`) pieces and
  a final (`F`) one (kubelet's buffer is 16 KiB; a small one here, so that logs are cut).
- ``gcp``: Cloud Logging's JSON export with `textPayload`, ``gcp_json`` with
  `jsonPayload.message` (a structured logger), ``loki_json``: Loki/Grafana's JSON lines with
  `message`; ``journal_json``: `journalctl -o json` (`MESSAGE` among cursor and id fields).
- ``kubectl_prefix``: `kubectl logs --prefix`: `[pod/<pod>/<container>] `.
- ``numbered``: an editor's or a viewer's line numbers, right aligned: `  12 | `.
- ``slack``: a chat quote: the poster's name and time, then `> ` before every line.
- ``tmux``: a copy from tmux's copy mode: the prompt and command above, a prompt below, tabs
  shown as spaces and the spaces at the ends of rows dropped (copy mode joins the rows a long
  line wrapped into; a terminal that does not is mangle's ``softwrap``).
- ``crlf_bom``: a Windows editor's save: a UTF-8 byte-order mark and CRLF line ends.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

Transform = Callable[[str, random.Random], str]


def _lines(text: str) -> list[str]:
    return text.splitlines()


def _stamp(i: int, rnd: random.Random) -> str:
    return f"2026-12-01T18:{i // 60 % 60:02d}:{i % 60:02d}.{rnd.randrange(10**9):09d}Z"


def cri(text: str, rnd: random.Random) -> str:
    size = rnd.choice([64, 96, 128])
    out = []
    nanos = rnd.randrange(10**8)
    for i, line in enumerate(_lines(text)):
        stream = "stderr" if rnd.random() < 0.7 else "stdout"
        pieces = [line[k : k + size] for k in range(0, len(line), size)] or [""]
        for n, piece in enumerate(pieces):
            tag = "F" if n == len(pieces) - 1 else "P"
            nanos += rnd.randrange(1, 10**5)  # the runtime stamps each write, in order
            stamp = f"2026-12-01T18:{i // 60 % 60:02d}:{i % 60:02d}.{nanos % 10**9:09d}Z"
            out.append(f"{stamp} {stream} {tag} {piece}")
    return "\n".join(out) + "\n"


def gcp(text: str, rnd: random.Random) -> str:
    out = []
    for i, line in enumerate(_lines(text)):
        record = {
            "insertId": f"{rnd.randrange(16**14):014x}",
            "labels": {"k8s-pod/app": "inference"},
            "logName": "projects/demo/logs/stderr",
            "receiveTimestamp": _stamp(i, rnd),
            "resource": {"labels": {"container_name": "server", "pod_name": "llm-0"}},
            "severity": "ERROR",
            "textPayload": line,
            "timestamp": _stamp(i, rnd),
        }
        out.append(json.dumps(record))
    return "\n".join(out) + "\n"


def gcp_json(text: str, rnd: random.Random) -> str:
    out = []
    for i, line in enumerate(_lines(text)):
        record = {
            "insertId": f"{rnd.randrange(16**14):014x}",
            "jsonPayload": {"logger": "sglang", "message": line, "pid": 1234},
            "severity": "INFO",
            "timestamp": _stamp(i, rnd),
        }
        out.append(json.dumps(record))
    return "\n".join(out) + "\n"


def loki_json(text: str, rnd: random.Random) -> str:
    out = []
    for i, line in enumerate(_lines(text)):
        record = {"labels": {"app": "inference", "pod": "llm-0"}, "message": line}
        record["timestamp"] = _stamp(i, rnd)
        out.append(json.dumps(record, ensure_ascii=False))
    return "\n".join(out) + "\n"


def journal_json(text: str, rnd: random.Random) -> str:
    boot = f"{rnd.randrange(16**32):032x}"
    out = []
    for i, line in enumerate(_lines(text)):
        usec = 1764612000000000 + i * 1000
        record = {
            "__CURSOR": f"s={boot};i={i + 1:x};b={boot};m={usec:x};t={usec:x};x={i:016x}",
            "__REALTIME_TIMESTAMP": str(usec),
            "__MONOTONIC_TIMESTAMP": str(9000000 + i),
            "_BOOT_ID": boot,
            "PRIORITY": "6",
            "_PID": "51494",
            "_COMM": "python3",
            "_HOSTNAME": "gpu-node-07",
            "SYSLOG_IDENTIFIER": "python3",
            "MESSAGE": line,
        }
        out.append(json.dumps(record))
    return "\n".join(out) + "\n"


def kubectl_prefix(text: str, rnd: random.Random) -> str:
    pod = f"pod/llm-{rnd.randrange(4)}-{rnd.randrange(16**5):05x}/server"
    return "".join(f"[{pod}] {line}\n" for line in _lines(text))


def numbered(text: str, rnd: random.Random) -> str:
    lines = _lines(text)
    start = rnd.randint(1, 900)
    pad = len(str(start + len(lines)))
    return "".join(f"{start + i:>{pad + 1}} | {line}\n" for i, line in enumerate(lines))


def slack(text: str, rnd: random.Random) -> str:
    who = rnd.choice(["alice", "bob.on-call", "Dana K."])
    head = f"{who}  {rnd.randint(1, 12)}:{rnd.randrange(60):02d} PM\n"
    return head + "".join(f"> {line}\n" if line else ">\n" for line in _lines(text))


def tmux(text: str, rnd: random.Random) -> str:
    host = rnd.choice(["gpu-node-07", "dgx01"])
    rows = [f"user@{host}:~$ kubectl logs llm-0 --tail=200"]
    # copy mode joins the rows a long line wrapped into, shows tabs as spaces, drops the
    # spaces at the ends of rows
    rows += [line.expandtabs(8).rstrip() for line in _lines(text)]
    rows.append(f"user@{host}:~$")
    return "\n".join(rows) + "\n"


def crlf_bom(text: str, rnd: random.Random) -> str:
    return "\ufeff" + "\r\n".join(_lines(text)) + "\r\n"


OWN: dict[str, Transform] = {
    f.__name__: f
    for f in (
        cri,
        gcp,
        gcp_json,
        loki_json,
        journal_json,
        kubectl_prefix,
        numbered,
        slack,
        tmux,
        crlf_bom,
    )
}
#: Two wrappers at once, in the order they were applied (mangle's names or the ones above).
COMBINATIONS = (
    ("kubectl", "softwrap"),
    ("compose", "wrap"),
    ("wrap", "quote"),
    ("interleave", "kubectl"),
    ("tabs", "numbered"),
    ("ansi", "journald"),
    ("cri", "crlf"),
)
