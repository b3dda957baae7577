"""Writers that lay precomputed results out: nothing here computes a figure."""
