"""The one Jinja environment of the project: templates/ only render file skeletons
(Python renders every expression and statement), undefined names are errors."""
from __future__ import annotations

import functools

import jinja2

from .cexpr import c_string
from .paths import TEMPLATES_DIR


@functools.lru_cache(maxsize=None)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["cstr"] = lambda s: c_string(str(s))  # a C++ string literal, escaped
    return env
