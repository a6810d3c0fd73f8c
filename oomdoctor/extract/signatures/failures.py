"""Failure lines: every way an SGLang server reports running out of (or near) memory, and the
crash wrappers, tracebacks and non-memory errors that get confused with it.

Formats: ../shared/reference/sglang-logs.md §3.4, §5, §7 and pytorch-oom.md.
"""

from __future__ import annotations

import re

from oomdoctor.extract.signatures.base import Signature, groups, sig
from oomdoctor.model import Scalar


def _exception(m: re.Match[str]) -> dict[str, Scalar] | None:
    etype = m.group("type")
    # "Error"/"Exception" as a bare word inside prose is not an exception line.
    if "." not in etype and not etype[:1].isupper():
        return None
    return groups(m)


def _retraction(m: re.Match[str]) -> dict[str, Scalar] | None:
    if m.group(0).startswith("Testing retraction"):
        return None
    return groups(m)


SIGNATURES: tuple[Signature, ...] = (
    # --- startup KV pool: the static share minus the weights leaves nothing (RAISE) -------------
    sig(
        "startup_kv_error",
        "Not enough memory",
        r"Not enough memory\. Please try to increase --mem-fraction-static\.?"
        r"(?: Current value: (?:[\w.]+\.)?mem_fraction_static=(?P<y>[\d.]+))?",
    ),
    sig(
        "startup_kv_error",
        "Loaded weights leave no GPU memory",
        r"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static="
        r"(?P<y>[\d.]+)\.(?: Raise --mem-fraction-static above (?P<suggested>[\d.]+)"
        r"(?: \(minimum viable = 1 - available/pre = (?P<minimum>[\d.]+)\))?)?",
    ),
    sig(
        "startup_kv_error",
        (
            "state cache is too small",
            "Not enough GPU memory for hybrid",
            "cannot hold even one request",
            "leaves no room for the full KV pool",
            "cannot fit ONE worst-case request",
            "leaves no KV-cache headroom",
        ),
        r"(?P<variant>Hybrid \(mamba/linear-attention\) state cache is too small"
        r"|Not enough GPU memory for hybrid"
        r"|SWA pool \(\d+ tokens\) cannot hold even one request"
        r"|pool cap \(.*?\) leaves no room for the full KV pool"
        r"|cannot fit ONE worst-case request"
        r"|Colocated GPU memory budget leaves no KV-cache headroom)"
        r"(?:: total=(?P<total>[\d.]+)GiB, fraction=(?P<fraction>[\d.]+), budget="
        r"(?P<budget>[\d.]+)GiB, (?:process_used|stage_load_used)=(?P<used>[\d.]+)GiB)?",
    ),
    # --- SGLang Omni placement: declared stage budgets that cannot fit (nothing ran out) -------
    sig(
        "omni_placement",
        ("exceeds placement limit", "declared budgets exceed", "declared KV pools alone exceed"),
        r"GPU (?P<gpu>\d+) (?:total_gpu_memory_fraction=(?P<fraction>[\d.]+) exceeds placement "
        r"limit (?P<limit>[\d.]+)|declared budgets exceed physical memory|declared KV pools "
        r"alone exceed physical memory)",
    ),
    sig(
        "negative_profile",
        "is larger than the profiled value",
        r"max_total_tokens=(?P<requested>\d+) is larger than the profiled value "
        r"(?P<profiled>-?\d+)",
    ),
    # --- co-tenant signals --------------------------------------------------------------------
    sig(  # the rest of the sentence and its numbers may be wrapped onto the next lines
        "tp_imbalance",
        "memory capacity is unbalanced",
        r"The memory capacity is unbalanced\.(?:\s*Some GPUs may be occupied by other"
        r"(?:\s+processes\.?)?)?"
        r"(?:\s*(?:min_per_gpu_memory|pre_model_load_memory)=(?P<min>[\d.]+),\s*"
        r"local_gpu_memory=(?P<local>[\d.]+))?",
    ),
    sig(
        "tp_imbalance_detail",
        ("pre_model_load_memory=", "min_per_gpu_memory=", "local_gpu_memory="),
        r"(?:(?:min_per_gpu_memory|pre_model_load_memory)=(?P<min>[\d.]+))?,?\s*"
        r"(?:local_gpu_memory=(?P<local>[\d.]+))?",
    ),
    sig(
        "stage_load_negative",
        "Stage load memory delta is negative",
        r"Stage load memory delta is negative: pre_load=(?P<pre>[\d.]+)GiB, "
        r"post_load=(?P<post>[\d.]+)GiB",
    ),
    # --- GPU out-of-memory texts (numbers are parsed by oomdoctor.pytorch_oom) ------------------
    # PyTorch's caching allocator (CUDA, ROCm/HIP, Intel XPU, Ascend NPU); users retype the case.
    sig(
        "cuda_oom",
        (
            "out of memory",
            "Out of memory",
            "OUT OF MEMORY",
            "Out Of Memory",
            "OutOfMemoryError",
            "Tried to allocate",
        ),
        # the exception class says it even when a wrap broke the words of the message (Ray's own
        # OutOfMemoryError is host RAM, signatures.ray); a paste that starts at the allocator's
        # second sentence still says what it is (`Tried to allocate 136.00 MiB. GPU 0 has ...`)
        r"(?i)\b(?:CUDA|HIP|NPU|XPU) out of memory\b"
        r"|(?<!exceptions\.)(?<!Ray)OutOfMemoryError(?=:)"
        r"(?!: (?:Task was killed|\d+ worker\(s\) were))"
        r"|(?-i:Tried to allocate \d{1,20}(?:\.\d{1,20})? ?(?:bytes|[KMGT]i?B)\. ?\(?GPU\b)",
    ),
    sig(
        "cuda_error_oom",
        (
            "rror: out of memory",
            "RROR: out of memory",
            "hipErrorOutOfMemory",
            "cudaErrorMemoryAllocation",
        ),
        # vLLM's `CUDA Error: out of memory at .../cumem_allocator.cpp:62` is its own kind
        # (signatures.colocation); the two are told apart on the line (_redundant).
        r"(?i)\b(?:CUDA|HIP) error: out of memory|hipErrorOutOfMemory|cudaErrorMemoryAllocation",
    ),
    sig("cublas_oom", "CUBLAS_STATUS_ALLOC_FAILED", r"CUBLAS_STATUS_ALLOC_FAILED"),
    sig("nccl_oom", "Cuda failure", r"Cuda failure (?:\d+ )?'out of memory'"),
    sig("triton_oom", "Triton Error", r"Triton Error \[(?:CUDA|HIP)\]: out of memory"),
    sig(  # XLA on TPU: device memory (HBM); its on-chip VMEM is signatures.errors' tpu_vmem
        "tpu_oom",
        ("memory space hbm", "Error allocating device buffer"),
        r"(?i)ran out of memory in memory space hbm|Error allocating device buffer: Attempting to "
        r"allocate",
    ),
    # --- CUDA-graph capture failures: the real reason follows the colon ------------------------
    sig(
        "graph_capture_failed",
        ("graph failed", "Graph failed", "Fail when using backend"),
        r"(?:Capture (?:cuda|CUDA|prefill CUDA) graph failed|Piecewise CUDA Graph failed with error)"
        r":\s*(?P<reason>.*)|Fail when using backend: (?P<backend>\w+) for prefill runner",
    ),
    # --- the scheduler's logical KV-slot accounting (not a CUDA OOM) --------------------------
    sig(
        "logical_kv_failure",
        "out of memory. Try to lower your batch size",
        r"(?P<phase>Prefill |Decode )?[Oo]ut of memory\. Try to lower your batch size\.",
    ),
    sig(  # 0.1.5 - 0.2.9 (reference §10.2), `nerver` as printed by 0.1.10 / 0.1.14; the rest of
        # the sentence may be cut or wrapped onto the next line
        "logical_kv_failure",
        ("out of memory. This should n", "Prefill out of memory.", "Decode out of memory."),
        r"^(?P<phase>Prefill |Decode )out of memory\.(?: This should\b.*)?$",
    ),
    sig("logical_kv_detail", "Try to allocate ", r"Try to allocate (?P<need>\d+) tokens"),
    sig(
        "logical_kv_detail",
        ("Available tokens", "Avaliable tokens", "Available full tokens"),
        r"Ava(?:il|li)able (?:full )?tokens: (?P<available>\d+)",
    ),
    sig(
        "logical_kv_detail",
        "available_size()=",
        r"available_size\(\)=(?P<available_size>\d+)",
    ),
    sig(
        "logical_kv_detail",
        "evictable_size()=",
        r"evictable_size\(\)=(?P<evictable_size>\d+)",
    ),
    sig(
        "req_slot_failure",
        (
            "alloc_req_slots runs out of memory",
            "Please set a smaller number for `--max-running-requests`",
        ),
        r"alloc_req_slots runs out of memory|Out of memory\. Please set a smaller number for "
        r"`--max-running-requests`",
    ),
    # --- KV pool pressure while serving (graceful) --------------------------------------------
    sig(
        "retraction",
        ("Retract requests", "out of memory happened", "Testing retraction"),
        r"(?:KV cache pool is full\. Retract requests\.|[Dd]ecode out of memory happened[.,]|"
        r"Testing retraction\.) #retracted_reqs: (?P<n>\d+)",
        _retraction,
    ),
    sig(
        "retract_abort",
        ("due to OOM", "Out of memory even after retracting"),
        r"retract_decode: aborted last request \S+ due to OOM|Out of memory even after retracting",
    ),
    sig(
        "request_too_long",
        ("exceeds the maximum allowed length", "longer than the KV cache pool size"),
        r"Input length \((?P<length>\d+) tokens\) exceeds the maximum allowed length"
        r"|Request length is longer than the KV cache pool size",
    ),
    # --- host memory, not GPU memory ----------------------------------------------------------
    sig(
        "host_oom_kill",
        ("Killed process", "exit code: -9", "exit code -9", "Exit code: -9"),
        r"Out of memory: Killed process (?P<pid>\d+)"
        r"|scheduler died during initialization \(exit code: -9\)"
        r"|crashed with exit code -9|Exit code: -9",
    ),
    sig(
        "host_alloc_failure",
        ("Cannot allocate memory", "Not enough host memory", "Pinned host memory allocation"),
        r"\[Errno 12\] Cannot allocate memory|Not enough host memory available"
        r"|Pinned host memory allocation of .* returned a null pointer",
    ),
    # --- GPU errors that are not exhaustion ----------------------------------------------------
    sig(
        "gpu_fault",
        (
            "illegal memory access",
            "no kernel image is available",
            "misaligned address",
            "device-side assert triggered",
            "unspecified launch failure",
            "Memory access fault",
        ),
        r"(?P<what>an illegal memory access was encountered|no kernel image is available"
        r"|misaligned address|device-side assert triggered|unspecified launch failure"
        r"|Memory access fault by GPU)",
    ),
    # --- crash wrappers and what follows a crash ------------------------------------------------
    sig("crash_wrapper", "hit an exception", r"(?<!\w)(?P<who>\w+) hit an exception"),
    sig("warmup_failed", "warmup error", r"Initialization failed\. warmup error"),
    sig(
        "sigquit",
        ("Received sigquit", "SIGQUIT received"),
        r"Received sigquit from a child process|SIGQUIT received\.",
    ),
    sig(
        "watchdog",
        ("watchdog timeout", "Watchdog timeout"),
        r"(?:(?<!\w)(?P<who>\w+) watchdog timeout|Watchdog timeout) "
        r"\(self\.watchdog_timeout=(?P<t>[\d.]+)",
    ),
    sig(
        "child_died",
        ("crashed with exit code", "scheduler died during initialization", "scheduler is dead"),
        r"Subprocess (?P<name>\S+) \(pid=(?P<pid>\d+)\) crashed with exit code (?P<code>-?\d+)"
        r"|Rank (?P<rank>\d+) scheduler (?:died during initialization \(exit code: "
        r"(?P<code2>-?\d+)\)|is dead)",
    ),
    # --- tracebacks ----------------------------------------------------------------------------
    sig(
        "traceback_start",
        "Traceback (most recent call last)",
        r"Traceback \(most recent call last\)",
    ),
    sig(
        "frame",
        'File "',
        r'^\s*File "(?P<path>[^"]+)", line (?P<lineno>\d+), in (?P<func>[^\s(]+)',
    ),
    # IPython's frames (IPython/core/ultratb.py, read from the 7.34.0, 8.18.1 and 9.18.1 sdists).
    # 8.x/9.x `File {compress_user(path)}:{lineno}, in {qualname}{args}`, the cell as
    # `Cell In[{n}], line {lineno}` (`, in f(x)` for a function defined in a cell); a module-level
    # frame has no `, in` part. A rendered notebook pasted as Markdown links the path or the line:
    # JupyterLab `File [~/x.py:64](http://host/lab/tree/x.py#line=63), in f`, VS Code
    # `File [~/x.py:64](file:///home/u/x.py:64), in f` and
    # `Cell In[5], [line 2](vscode-notebook-cell:?execution_count=5&line=2)`.
    sig(
        "frame",
        ("File [", "File ~", "File /"),
        r"^\s*File \[?(?P<path>[^\]\s,()]+?\.py):(?P<lineno>\d+)(?:\]\([^)]*\))?, in "
        r"(?P<func>[\w.<>]+)",
    ),
    sig(
        "frame",
        "Cell In[",
        r"^\s*Cell (?P<path>In\[\d*\]), \[?line (?P<lineno>\d+)(?:\]\([^)]*\))?"
        r"(?:, in (?P<func>[\w.<>]+))?",
        lambda m: {**groups(m), "func": m.group("func") or "<module>"},
    ),
    # 7.x (and 8.x's fallback for a file over 10,000 lines): `{path} in {func}{args}` with no
    # line number (the `---->` arrow under it has it); the cell is `<ipython-input-3-0c9e2ad3b6f1>
    # in <module>` (ipykernel 5), `/tmp/ipykernel_N/M.py in <module>` (ipykernel 6).
    sig(
        "frame",
        (".py in ", "<ipython-input-"),
        r"^(?P<path>(?:~|/|[A-Za-z]:\\)\S*?\.py|<ipython-input-[\w-]+>) in "
        r"(?P<func>[\w.<>]+)(?:\(|$)",
    ),
    sig(
        "exception",
        ("Error", "Exception"),
        r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception))(?::\s?(?P<message>.*))?$",
        _exception,
    ),
)

#: Pieces of an allocator OOM message that a logger or a user wrapped onto the next lines.
OOM_PARTS: tuple[Signature, ...] = (
    sig(
        "oom_part",
        (
            "total capacity",
            "total capacty",
            "memory in use",
            "allocated by PyTorch",
            "reserved by PyTorch",
            "is free.",
            "allocated in private pools",
            "already allocated",
            "reserved in total",
            "current active",
            # a wrap can leave a piece with nothing but a size, or a word, in it
            "GiB",
            "MiB",
            "KiB",
            " bytes",
            "PyTorch",
            "unallocated",
            "capacity",
        ),
        r".+",
    ),
)
