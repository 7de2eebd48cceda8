"""``python -m tenure`` is the ``tenure`` command."""

from tenure.service.cli import main

main()
