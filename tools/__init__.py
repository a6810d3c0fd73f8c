"""Repository tools (not shipped in the wheel)."""
