"""The data model every layer shares: schemas and constants, traces, time accounts, results,
findings, the profile aggregate, and vendor knowledge as data (docs/architecture.md)."""
