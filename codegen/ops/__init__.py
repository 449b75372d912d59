"""The op tables and what needs them to make, print and check IR: the primitives
(primitives/), the structured ops for / if / while (structured/), the builder that types
new ops by their rules, the printer and the verifier."""
from . import primitives, structured  # noqa: F401  (they fill the table entry() reads)
