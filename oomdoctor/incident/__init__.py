"""Stage 3, incident: assemble facts into one incident (launches, per-rank checkpoints,
tracebacks, failures) and place it: engine, phase, site and pipeline stage."""
