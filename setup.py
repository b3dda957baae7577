"""The project's compiled parts, both optional (pure-Python paths give the same results where
they cannot be built): the Kineto chunk scanner and the replay's short-path walk."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "perfledger.sources._kscan",
            ["src/perfledger/sources/_kscan.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "perfledger.analysis._schedule",
            ["src/perfledger/analysis/_schedule.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
    ]
)
