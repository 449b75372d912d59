"""`mdlc graph`: a model, or its gradient program, as a Graphviz picture (DOT, or SVG,
PNG and PDF through Graphviz's `dot`)."""
from .output import FORMATS, write
from .picture import picture

__all__ = ["FORMATS", "picture", "write"]
