"""The console script (and ``python -m oomdoctor``): tune start-up, then run the CLI."""

from __future__ import annotations

import gc


def main() -> None:
    # Start-up creates many long-lived objects (modules, classes, compiled patterns) and hardly
    # any garbage cycles; at the default threshold (700) the cyclic collector scans them over
    # and over, about 5% of a short run. A higher first-generation threshold keeps collection
    # going on long runs over big logs.
    gc.set_threshold(50_000, 10, 10)
    from oomdoctor.cli import main as run

    try:
        run()
    finally:
        # The interpreter's shutdown runs full collections over every object still alive (all
        # of start-up's), a tenth of a short run; frozen objects are left out of them. Nothing
        # here relies on a collection at exit: files are closed by their `with` blocks, and
        # atexit handlers (multiprocessing's among them) run as before.
        gc.freeze()


if __name__ == "__main__":
    main()
