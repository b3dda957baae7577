"""The project's one compiled part: the Kineto chunk scanner (optional; a pure-Python path
decodes the same traces where it cannot be built)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "perfledger.sources._kscan",
            ["src/perfledger/sources/_kscan.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
