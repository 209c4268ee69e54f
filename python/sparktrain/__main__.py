"""``python -m sparktrain``: the ``sparktrain`` console script."""

from sparktrain.cli import main

raise SystemExit(main())
