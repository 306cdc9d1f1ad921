"""The house process an estate's supervisor starts: ``python -m flowcast.cli.worker LAYOUT --yard YARD``.

flowcast.house.worker is the house process; this entry point, at the top
layer, hands it the export layer's recorder, so a house of an estate run
with ``--export`` (or a layout's ``export:``) records its events without
the house layer importing the export layer above it.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from flowcast.export.estatehouse import record_house
    from flowcast.house.worker import main as house_main

    return house_main(argv, record=record_house)


if __name__ == "__main__":
    sys.exit(main())
