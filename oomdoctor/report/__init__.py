"""Stage 7, report: the report dict built from a diagnosis (redacted), and the reporters that
format it (text, Markdown, JSON, the card picture). Reporters decide nothing."""
