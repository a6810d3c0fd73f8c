"""Stage 1, read: inputs (files, gzip, UTF-16, stdin) as byte blocks that end on line boundaries,
and the fast scan that keeps only the lines worth parsing (on every core for big files)."""
