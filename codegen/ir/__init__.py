"""The IR core, at the bottom of the compiler: typed SSA values, ops and blocks
(graph.py), symbolic dims and tensor types (shapes.py), dtypes (dtypes.py), and the
errors every stage reports (diagnostics.py). It knows no op by name and imports nothing
else of mdl."""
