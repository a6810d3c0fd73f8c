"""Stage 2, extract: strip each candidate line's envelope and turn it into typed facts
(signatures, the engine markers of the knowledge tables, the numbers of an OOM message)."""
