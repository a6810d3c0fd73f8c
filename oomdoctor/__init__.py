"""oomdoctor: why an SGLang server ran out of GPU memory, and what to change."""

__version__ = "0.1.0"
