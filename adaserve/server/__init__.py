"""The HTTP server: the embedded engine behind the contract in DESIGN.md ("HTTP contract")."""
