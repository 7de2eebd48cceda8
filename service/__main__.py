"""``python -m service`` is ``tenure``."""

from service.cli import main

main()
