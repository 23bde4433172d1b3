"""Optimization passes: one module per pass; each = a frozen config + applicable() + apply()."""
