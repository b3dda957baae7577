"""Mutation fuzzing of every importer: damaged inputs are read or refused in one line."""
