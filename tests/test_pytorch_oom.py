"""PyTorch allocator OOM texts of every era, parsed into GiB (pytorch-oom.md)."""

from __future__ import annotations

import pytest

from oomdoctor.extract.pytorch_oom import needs_more, parse_oom

CURRENT = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.19 GiB of "
    "which 1.10 GiB is free. Process 99123 has 20.00 GiB memory in use. Including non-PyTorch "
    "memory, this process has 58.07 GiB memory in use. Of the allocated memory 52.50 GiB is "
    "allocated by PyTorch, with 512.00 MiB allocated in private pools (e.g., CUDA Graphs), and "
    "3.20 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
    "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


def test_current_form() -> None:
    oom = parse_oom(CURRENT)
    assert oom.form == "pytorch"
    assert oom.requested_gib == pytest.approx(2.0)
    assert oom.gpu == 3
    assert oom.total_gib == pytest.approx(79.19)
    assert oom.free_gib == pytest.approx(1.10)
    assert oom.processes == ((99123, 20.0),)
    assert oom.this_process_gib == pytest.approx(58.07)
    assert oom.allocated_gib == pytest.approx(52.5)
    assert oom.private_pools_gib == pytest.approx(0.5)
    assert oom.reserved_unallocated_gib == pytest.approx(3.2)
    assert oom.complete
    assert not needs_more(CURRENT)


def test_units_bytes_kib_mib() -> None:
    oom = parse_oom(
        "CUDA out of memory. Tried to allocate 512 bytes. GPU 0 has a total capacity of 23.65 GiB of "
        "which 1.50 KiB is free. Of the allocated memory 20.00 MiB is allocated by PyTorch, and "
        "0 bytes is reserved by PyTorch but unallocated."
    )
    assert oom.requested_gib == pytest.approx(512 / 2**30)
    assert oom.free_gib == pytest.approx(1.5 / 2**20)
    assert oom.allocated_gib == pytest.approx(20 / 1024)
    assert oom.reserved_unallocated_gib == 0.0


def test_typo_capacty_and_blank_gpu_index() -> None:
    oom = parse_oom(
        "CUDA out of memory. Tried to allocate 20.00 MiB. GPU  has a total capacty of 79.15 GiB of "
        "which 3.56 MiB is free. Of the allocated memory 77.70 GiB is allocated by PyTorch, and "
        "800.00 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
        "large try setting max_split_size_mb to avoid fragmentation."
    )
    assert oom.gpu is None
    assert oom.total_gib == pytest.approx(79.15)
    assert oom.free_gib == pytest.approx(3.56 / 1024)


def test_legacy_1x_form() -> None:
    oom = parse_oom(
        "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 4; 31.75 GiB total capacity; 30.29 GiB "
        "already allocated; 3.75 MiB free; 30.40 GiB reserved in total by PyTorch) If reserved memory "
        "is >> allocated memory try setting max_split_size_mb to avoid fragmentation."
    )
    assert oom.form == "pytorch_legacy"
    assert oom.gpu == 4
    assert oom.total_gib == pytest.approx(31.75)
    assert oom.allocated_gib == pytest.approx(30.29)
    assert oom.reserved_total_gib == pytest.approx(30.40)


def test_legacy_with_allowed() -> None:
    oom = parse_oom(
        "CUDA out of memory. Tried to allocate 1.00 GiB (GPU 0; 79.15 GiB total capacity; 60.00 GiB "
        "already allocated; 10.00 GiB free; 63.00 GiB allowed; 61.00 GiB reserved in total by PyTorch)"
    )
    assert oom.allowed_gib == pytest.approx(63.0)
    assert oom.reserved_total_gib == pytest.approx(61.0)


def test_allowed_clause_in_current_form() -> None:
    oom = parse_oom(
        "CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 79.19 GiB of "
        "which 30.00 GiB is free. Including non-PyTorch memory, this process has 40.00 GiB memory in "
        "use. 39.59 GiB allowed; Of the allocated memory 38.00 GiB is allocated by PyTorch, and 1.00 "
        "GiB is reserved by PyTorch but unallocated."
    )
    assert oom.allowed_gib == pytest.approx(39.59)


def test_truncated_message_keeps_what_is_there() -> None:
    text = "CUDA out of memory. Tried to allocate 2.48 GiB. GPU 0 has a total capacity of 23.55 GiB of which 612.94 MiB is free. ..."
    oom = parse_oom(text)
    assert oom.requested_gib == pytest.approx(2.48)
    assert oom.free_gib == pytest.approx(612.94 / 1024)
    assert oom.allocated_gib is None
    assert not oom.complete
    assert not needs_more(text)  # the user's "..." says nothing more is coming


def test_wrapped_message_needs_more() -> None:
    assert needs_more(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of"
    )


def test_hip_form() -> None:
    oom = parse_oom(
        "HIP out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 191.98 GiB of which 2.00 GiB is free."
    )
    assert oom.requested_gib == 4.0
    assert oom.total_gib == pytest.approx(191.98)
