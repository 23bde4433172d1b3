"""`Findings`: what a result's `.findings` property returns, a list of lines that the old call spelling still reads."""

from __future__ import annotations

import warnings


class Findings(list[str]):
    """The findings of a training measurement or a live A/B, a plain list of lines. `.findings` was a method on
    those two and an attribute on `Diagnosis` and `DdpResult`; it is an attribute on all four since 2026-12-07, and
    calling it (`m.findings()`) still returns the list, with a DeprecationWarning."""

    def __call__(self) -> Findings:
        warnings.warn("`.findings` is a property since 2026-12-07, as on Diagnosis: write `.findings`, not "
                      "`.findings()`", DeprecationWarning, stacklevel=2)
        return self
