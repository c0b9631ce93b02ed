"""``python -m neuronscope ...``: the command line (see :mod:`neuronscope.cli`)."""

from neuronscope.cli import main

if __name__ == "__main__":
    main()
