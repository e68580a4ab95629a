"""Moved to genai_pacer.precompute.batch in 0.2.0; this alias is removed in 0.3.0 (_internal/moved.py)."""
from ._internal.moved import alias

alias(__name__)
