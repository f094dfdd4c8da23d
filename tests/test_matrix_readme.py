"""README's compatibility matrix is the matrix's own tables (tests/matrix/readme.py): docs cannot drift."""

from __future__ import annotations

from tests.matrix.readme import README, current, render


def test_readme_matrix_block_is_generated_from_the_tables() -> None:
    block = current(README.read_text())
    assert block is not None, "README has no matrix block: python -m tests.matrix.readme --write"
    assert block == render(), "README's matrix block differs from tests/matrix: python -m tests.matrix.readme --write"
