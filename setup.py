"""The one build step pyproject.toml cannot state: the compiled bloom filter kernel (`_bloom_murmur.c`, loaded with
ctypes by `tableservice.hudi.file_group.bloom_kernel`; it uses no Python API). It is optional: without a C compiler
the build goes on, and bloom filters are built by the numpy path (`bloom_kernel.status()` says which is in use)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tableservice.hudi.file_group._bloom_murmur",
            sources=["tableservice/hudi/file_group/_bloom_murmur.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
