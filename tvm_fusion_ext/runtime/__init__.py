"""Runtimes: NeoFlow's dynamic mode (section 6)."""
