"""`python -m bridge` runs the same CLI as the `agent-bridge` console script."""

from bridge.cli import main

if __name__ == "__main__":
    main()
