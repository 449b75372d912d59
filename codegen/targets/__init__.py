"""The targets: what differs between machines (backend/target.py says what a Target
owns). `registry.target(name)` gives one by name."""
