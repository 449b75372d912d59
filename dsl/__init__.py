"""The .mdl front end: parsing, scopes and sharing, checking, elaboration to IR."""
from codegen.ir.diagnostics import MdlError, UsageError

from .check import (CheckedModel, check_file, check_source, model_names, params_table,
                    summary, to_json)

__all__ = ["CheckedModel", "MdlError", "UsageError", "check_file", "check_source",
           "model_names", "params_table", "summary", "to_json"]
