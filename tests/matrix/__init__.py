"""The pair matrix: every front × every back × every event kind (tests/test_e2e_matrix.py)."""
