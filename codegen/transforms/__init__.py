"""Graph to graph: `prepare` (expansions, a for's lengths and checkpoints), `autodiff`
(the generic reverse walk), `passes` (fold, simplify, CSE, DCE), and `tapes` (what a
graph keeps for its backward pass)."""
