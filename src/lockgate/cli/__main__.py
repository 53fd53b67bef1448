"""``python -m lockgate.cli``."""

from . import main

main()
