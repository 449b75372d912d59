"""The .mdl front end: parsing, scopes and sharing, checking, elaboration to IR."""
from .check import (CheckedModel, check_file, check_source, model_names, params_table, summary,
                    to_json)
from .diagnostics import MdlError
from .elaborate import UsageError

__all__ = ["CheckedModel", "MdlError", "UsageError", "check_file", "check_source",
           "model_names", "params_table", "summary", "to_json"]
