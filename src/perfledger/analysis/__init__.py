"""Pure analyses over the model: nothing here reads or writes a file (docs/architecture.md)."""
