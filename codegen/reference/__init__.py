"""The NumPy reference interpreter (interpreter.py), which every target is tested
against, and the finite-difference gradient check it is tested by (gradcheck.py)."""
