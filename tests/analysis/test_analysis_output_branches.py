"""A condition whose branches only log (once) or cast a value in place chooses no kernel (unreached.py), on a real
git history."""

from __future__ import annotations
