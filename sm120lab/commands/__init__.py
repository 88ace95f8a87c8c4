"""CLI subcommands, one module each (see :mod:`sm120lab.cli`). Import heavy modules lazily
inside ``func`` so ``sm120lab --help`` stays fast and works without optional packages."""
