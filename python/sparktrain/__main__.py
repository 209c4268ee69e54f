"""``python -m sparktrain``: the ``sparktrain`` console script. Runs in the ``sparktrain`` command."""

from sparktrain.cli import main

raise SystemExit(main())
