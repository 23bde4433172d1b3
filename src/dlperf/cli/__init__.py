"""The command-line interface: one thin module per command over the library."""
