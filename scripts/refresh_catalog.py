"""Refresh plait's built-in model catalog from LiteLLM's public model table.

    uv run python scripts/refresh_catalog.py            # download the table, rewrite
    uv run python scripts/refresh_catalog.py --source model_prices.json --date 2026-07-24

Rewrites ``src/plait/adapters/models/catalog.json`` (window, max output, prices and
capabilities of the models listed in ``plait.adapters.models._catalog_source.WANTED``)
and prints each wanted model the source lacks. Review the diff before committing it: the
catalog is what plait uses for automatic compaction and ``--max-cost``. Needs the network
only when no ``--source`` file is given; plait itself never downloads it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import urllib.request
from pathlib import Path

from plait.adapters.models._catalog_source import catalog_from_litellm, render_catalog

SOURCE_URL = (
    "https://raw.githubusercontent.com/BerriAI/litellm/main/model_prices_and_context_window.json"
)
CATALOG = Path(__file__).resolve().parent.parent / "src/plait/adapters/models/catalog.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, help="a local copy of the table")
    parser.add_argument("--date", type=dt.date.fromisoformat, help="the table's date")
    parser.add_argument("--out", type=Path, default=CATALOG)
    args = parser.parse_args(argv)
    if args.source is None:
        with urllib.request.urlopen(SOURCE_URL, timeout=60) as response:
            raw = response.read()
        origin = SOURCE_URL
    else:
        raw = args.source.read_bytes()
        origin = f"{SOURCE_URL} (copy read from {args.source.name})"
    as_of = args.date or dt.datetime.now(dt.UTC).date()
    document, notes = catalog_from_litellm(json.loads(raw), as_of=as_of, origin=origin)
    args.out.write_text(render_catalog(document), encoding="utf-8")
    count = sum(len(rows) for rows in document["models"].values())
    print(f"{args.out.name}: {count} models as of {document['as_of']}")
    for note in notes:
        print(f"  left out {note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
