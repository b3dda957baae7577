"""The project's compiled parts, all optional (pure-Python paths give the same results where
they cannot be built): the Kineto chunk scanner, the replay's short-path walk, the numbering
of rows of integer columns (and the step graph's chain and sort-key passes) and the timeline's
record formatter."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "perfledger.sources._kscan",
            ["src/perfledger/sources/_kscan.c"],
            depends=["src/perfledger/_decimal.h"],
            # copy_spans copies large layouts on two threads
            extra_compile_args=["-O3", "-pthread"],
            extra_link_args=["-pthread"],
            optional=True,
        ),
        Extension(
            "perfledger.analysis._schedule",
            ["src/perfledger/analysis/_schedule.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "perfledger.analysis._columns",
            ["src/perfledger/analysis/_columns.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "perfledger.render.timeline._records",
            ["src/perfledger/render/timeline/_records.c"],
            depends=["src/perfledger/_decimal.h"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
    ]
)
