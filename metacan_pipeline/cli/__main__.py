"""``python -m metacan_pipeline.cli``: the ``metacan`` command."""

from . import main

main()
