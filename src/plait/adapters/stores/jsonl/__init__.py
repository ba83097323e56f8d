"""The JSONL store: one directory of plain files (inspection)."""
