"""The compiled accelerator of the record codec (DESIGN.md section 1): one C extension,
core.record._accel, built by `pip install` (and so by `make venv`). Everything else about the
package is in pyproject.toml. The pure-Python reference stays the fallback
(core/record/accel.py); MQSTORE_PURE_PYTHON=1 forces it."""
from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "core.record._accel", ["core/record/_accel.c", "core/record/_crc32.c", "core/record/_check.c",
                          "core/record/_hashing.c", "core/record/_walk.c"],
    depends=["core/record/_crc32.h", "core/record/_parts.h"],
    extra_compile_args=["-O3", "-std=c11", "-Wall", "-fvisibility=hidden"])])
