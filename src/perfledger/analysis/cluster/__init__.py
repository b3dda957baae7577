"""The cluster pass over several ranks: per-rank accounts, load balance, slow ranks, the
collectives aligned across ranks, link usage, and profile-wide tables merged from per-rank
pieces."""
