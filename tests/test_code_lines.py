"""The source line a traceback prints under each frame reaches the frame, whatever it holds: the
code says which class's method ran (knowledge/code.py hashes the encoder methods' lines)."""

from __future__ import annotations

from pathlib import Path

from oomdoctor import pipeline

TRACE = """\
Traceback (most recent call last):
  File "/opt/venv/lib/python3.12/site-packages/vllm/model_executor/models/qwen2_5_vl.py", line 338, in forward
    output_i = F.scaled_dot_product_attention(q_i,
               ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/opt/venv/lib/python3.12/site-packages/torch/nn/functional.py", line 5101, in helper
    return torch.empty(shape, device=device)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 18.00 GiB. GPU 0 has a total capacity of 31.98 GiB of which 4.20 GiB is free.
"""


def test_every_frame_gets_its_code_line(tmp_path: Path) -> None:
    log = tmp_path / "trace.log"
    log.write_text(TRACE, encoding="utf-8")
    incident = pipeline.read([str(log)], pipeline.load_rules())
    assert incident.primary is not None
    codes = [f.code for f in incident.primary.frames]
    assert codes == [
        "output_i = F.scaled_dot_product_attention(q_i,",
        "return torch.empty(shape, device=device)",
    ]
    # the caret line and the code are not failures or facts of their own
    assert "code" not in incident.fact_counts


def test_the_code_line_of_a_crlf_log(tmp_path: Path) -> None:
    """Windows line ends (a `\\r` before each newline) split a line into segments: the code line's
    own segment still reaches its frame."""
    log = tmp_path / "trace.log"
    log.write_bytes(TRACE.replace("\n", "\r\n").encode())
    incident = pipeline.read([str(log)], pipeline.load_rules())
    assert incident.primary is not None
    assert incident.primary.frames[0].code == "output_i = F.scaled_dot_product_attention(q_i,"
