"""The .mdl front end: parsing, scopes and sharing, checking, elaboration to IR.

The checker's names load on first use: importing them loads Lark's parser, the primitive
table and NumPy, which `mdlc build` of a module the cache already holds does without
(it needs only dsl.imports)."""
from codegen.ir.diagnostics import MdlError, UsageError

_CHECKER = ("CheckedModel", "SourceFile", "check_file", "check_source", "defines_by_model",
            "file_warnings", "model_names", "params_table", "summary", "to_json")

__all__ = ["MdlError", "UsageError", *_CHECKER]


def __getattr__(name: str):
    if name in _CHECKER:
        from . import check
        return getattr(check, name)
    raise AttributeError(f"module 'dsl' has no attribute {name!r}")
